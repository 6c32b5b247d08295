"""Which pods of a victim job go next, so that no gang is ever left broken.

A job offers its pods as victims one *step* at a time:

1. elastic surplus, deepest first: one pod above a leaf subgroup's ``minMember``, from the
   far end of task order, in the least-preferred subgroup that has one;
2. a whole surplus member: when a subgroup set has more satisfied members than it needs,
   the least-preferred member goes entirely;
3. otherwise the whole job (every active pod).

Subgroups are preferred in the order they are listed; the far end is the last one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpushare.model import Job, Pod
from gpushare.scheduler.gang import task_order_key


@dataclass(slots=True)
class _PodSet:
    name: str
    min_member: int
    pods: list[Pod] = field(default_factory=list)


@dataclass(slots=True)
class _SetNode:
    name: str
    needed: int | None  # members that must be satisfied; None: all
    members: list[_PodSet | _SetNode] = field(default_factory=list)


def build_tree(job: Job, pods: Sequence[Pod]) -> _SetNode:
    """The job's gang tree: a root set whose members are pod sets or nested sets."""
    root = _SetNode("", job.min_subgroup if job.subgroups else None)
    if not job.subgroups:
        root.members.append(_PodSet("", job.min_member, list(pods)))
        return root
    nodes: dict[str, _PodSet | _SetNode] = {}
    for sub in job.subgroups.values():
        if sub.children or sub.min_member is None:
            nodes[sub.name] = _SetNode(sub.name, sub.min_subgroup)
        else:
            nodes[sub.name] = _PodSet(sub.name, sub.min_member)
    for sub in job.subgroups.values():
        parent = root if sub.parent is None else nodes.get(sub.parent)
        if isinstance(parent, _SetNode):
            parent.members.append(nodes[sub.name])
    for pod in pods:
        node = nodes.get(pod.subgroup or "")
        if isinstance(node, _PodSet):
            node.pods.append(pod)
    return root


class VictimSteps:
    """Victim steps of one job over a shrinking set of still-active pods."""

    def __init__(self, job: Job, pods: Sequence[Pod], is_active: Callable[[Pod], bool]):
        self.job = job
        self.root = build_tree(job, pods)
        self.is_active = is_active
        self._order = lambda pod: task_order_key(pod, job)

    # -- counting -------------------------------------------------------------------------
    def _active(self, podset: _PodSet) -> list[Pod]:
        return [p for p in podset.pods if self.is_active(p)]

    def _satisfied(self, member: _PodSet | _SetNode) -> bool:
        if isinstance(member, _PodSet):
            active = len(self._active(member))
            return active > 0 and active >= member.min_member
        count = self._num_satisfied(member)
        return count > 0 and count >= self._needed(member)

    def _num_satisfied(self, node: _SetNode) -> int:
        return sum(1 for m in node.members if self._satisfied(m))

    @staticmethod
    def _needed(node: _SetNode) -> int:
        return len(node.members) if node.needed is None else node.needed

    def elastic_state(self) -> int:
        """0 below its gang size, 1 exactly at it, 2 above it."""
        members = self.root.members
        if len(members) == 1 and isinstance(members[0], _PodSet):
            podset = members[0]
            active = sum(1 for p in podset.pods if self.is_active(p))
            if active == 0 or active < podset.min_member:
                return 0
            return 2 if active > podset.min_member else 1
        if not self.satisfied():
            return 0
        return 2 if self._has_surplus(self.root) else 1

    def satisfied(self) -> bool:
        """Whether the job's active pods still form its gang."""
        count = self._num_satisfied(self.root)
        return count > 0 and count >= self._needed(self.root)

    def _has_surplus(self, member: _PodSet | _SetNode) -> bool:
        if isinstance(member, _PodSet):
            return len(self._active(member)) > member.min_member
        if self._num_satisfied(member) > self._needed(member):
            return True
        return any(self._has_surplus(m) for m in member.members)

    # -- steps ----------------------------------------------------------------------------
    def _all_active(self, member: _PodSet | _SetNode) -> list[Pod]:
        if isinstance(member, _PodSet):
            return sorted(self._active(member), key=self._order, reverse=True)
        out: list[Pod] = []
        for m in member.members:
            out.extend(self._all_active(m))
        return out

    def _elastic(self, member: _PodSet | _SetNode) -> list[Pod]:
        if isinstance(member, _PodSet):
            active = self._active(member)
            if len(active) <= member.min_member:
                return []
            return [max(active, key=self._order)]
        return self._elastic_from_set(member)

    def _elastic_from_set(self, node: _SetNode) -> list[Pod]:
        satisfied = self._num_satisfied(node)
        if satisfied == 0:
            return []
        reverse_members = list(reversed(node.members))
        if self._has_surplus(node):
            for member in reverse_members:
                taken = self._elastic(member)
                if taken:
                    return taken
        if self._needed(node) < satisfied:
            for member in reverse_members:
                taken = self._all_active(member)
                if taken:
                    return taken
        return []

    def next_step(self) -> list[Pod]:
        """The next pods to offer as victims (empty when the job has no active pod left)."""
        taken = self._elastic_from_set(self.root)
        if taken:
            return taken
        return self._all_active(self.root)

    def surplus_only(self) -> list[Pod]:
        """Only an elastic step (never the job's core): for jobs protected by min-runtime."""
        return self._elastic_from_set(self.root)

    def active_count(self) -> int:
        return len(self._all_active(self.root))
