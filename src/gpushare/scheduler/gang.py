"""Gangs: which pods a job needs next, and how far along it is.

A job without subgroups is one leaf with ``min_member``. With subgroups, leaves have
``min_member`` and inner subgroups are satisfied when ``min_subgroup`` of their children
are (all when unset); the job itself applies ``min_subgroup`` to its top-level subgroups.
Until the tree is satisfied the job asks for exactly what satisfies it (all or nothing);
after that, for one more pod per step: the first in task order, or (``by_ratio``, KAI's
subgroup order) the first of the leaf with the lowest allocation ratio.
"""

from __future__ import annotations

from fractions import Fraction

from gpushare.model.job import Job
from gpushare.model.pod import ACTIVE_ALLOCATED, Pod, PodStatus

DEFAULT_LEAF = ""

BELOW_MIN, AT_MIN, ABOVE_MIN = 0, 1, 2


def task_order_key(pod: Pod, job: Job) -> tuple[int, int, int, int]:
    """Higher pod priority first, then a higher ``taskOrder`` (ranked pods before unranked),
    then the order given."""
    priority = pod.priority if pod.priority is not None else job.priority
    if pod.task_order is None:
        return (-priority, 1, 0, pod.index)
    return (-priority, 0, -pod.task_order, pod.index)


class GangView:
    """A job's pods arranged by leaf subgroup, for one decision."""

    __slots__ = ("_elastic", "_next", "active", "by_ratio", "job", "pending", "pods", "version")

    def __init__(self, job: Job, pods: list[Pod], by_ratio: bool = False) -> None:
        self.job = job
        self.pods = pods
        #: The extra pod of a satisfied gang comes from the leaf with the lowest
        #: allocation ratio (``Behaviour.spare_pods_by_ratio``).
        self.by_ratio = by_ratio
        self.version = -1
        self._elastic: int | None = None
        self._next: list[Pod] | bool | None = False  # False: not worked out yet
        self.active: dict[str, int] = {}
        self.pending: dict[str, list[Pod]] = {}
        for pod in pods:
            leaf = pod.subgroup if (pod.subgroup and job.subgroups) else DEFAULT_LEAF
            if pod.status in ACTIVE_ALLOCATED or pod.status is PodStatus.SUCCEEDED:
                self.active[leaf] = self.active.get(leaf, 0) + 1
            elif pod.status is PodStatus.PENDING:
                self.pending.setdefault(leaf, []).append(pod)
        for leaf_pods in self.pending.values():
            leaf_pods.sort(key=lambda p: task_order_key(p, job))

    # --- the tree -----------------------------------------------------------
    def _children(self, name: str | None) -> list[str]:
        if name is None:
            return self.job.top_subgroups()
        return self.job.subgroups[name].children

    def _k(self, name: str | None) -> int:
        kids = self._children(name)
        k = self.job.min_subgroup if name is None else self.job.subgroups[name].min_subgroup
        return len(kids) if k is None else min(k, len(kids))

    def _leaf_min(self, name: str | None) -> int:
        if name is None:
            return self.job.min_member
        m = self.job.subgroups[name].min_member
        return 0 if m is None else m

    def _is_leaf(self, name: str | None) -> bool:
        if name is None:
            return not self.job.subgroups
        return not self.job.subgroups[name].children

    def _leaf_key(self, name: str | None) -> str:
        return DEFAULT_LEAF if name is None else name

    def satisfied(self, name: str | None = None) -> bool:
        if self._is_leaf(name):
            return self.active.get(self._leaf_key(name), 0) >= self._leaf_min(name)
        kids = self._children(name)
        return sum(1 for kid in kids if self.satisfied(kid)) >= self._k(name)

    def needed(self, name: str | None = None) -> list[Pod] | None:
        """The fewest pending pods that satisfy this (sub)tree, or None if it cannot be."""
        if self._is_leaf(name):
            leaf = self._leaf_key(name)
            need = self._leaf_min(name) - self.active.get(leaf, 0)
            if need <= 0:
                return []
            pending = self.pending.get(leaf, [])
            return pending[:need] if len(pending) >= need else None
        kids = self._children(name)
        missing = self._k(name) - sum(1 for kid in kids if self.satisfied(kid))
        if missing <= 0:
            return []
        chosen: list[Pod] = []
        for kid in kids:
            if missing == 0:
                break
            if self.satisfied(kid):
                continue
            more = self.needed(kid)
            if more is None:
                continue
            chosen.extend(more)
            missing -= 1
        return chosen if missing == 0 else None

    def next_step(self) -> list[Pod] | None:
        """Pods to place in the job's next step: its gang, or one more pod; None if the
        gang cannot be formed from the pods that exist."""
        if self._next is False:
            self._next = self._next_step()
        return None if self._next is None else list(self._next)  # type: ignore[arg-type]

    def _next_step(self) -> list[Pod] | None:
        if not self.satisfied():
            return self.needed()
        rest = [p for pods in self.pending.values() for p in pods]
        if not rest:
            return []
        return [min(rest, key=lambda p: (self._leaf_rank(p), task_order_key(p, self.job)))]

    def _leaf_rank(self, pod: Pod) -> Fraction:
        """The extra pod's leaf rank: 0 (task order alone decides), or with ``by_ratio``
        the leaf's allocation ratio, active pods over its ``minMember`` (a leaf of
        minimum 0 last)."""
        if not self.by_ratio:
            return _NO_RANK
        leaf = pod.subgroup if (pod.subgroup and self.job.subgroups) else DEFAULT_LEAF
        least = self._leaf_min(None if leaf == DEFAULT_LEAF else leaf)
        if least <= 0:
            return _LAST_RANK
        return Fraction(self.active.get(leaf, 0), least)

    def min_total(self, name: str | None = None) -> int:
        """Pods the gang needs at least (the smallest satisfying choice)."""
        if self._is_leaf(name):
            return self._leaf_min(name)
        sizes = sorted(self.min_total(kid) for kid in self._children(name))
        return sum(sizes[: self._k(name)])

    def active_total(self) -> int:
        return sum(self.active.values())

    def elastic_state(self) -> int:
        if self._elastic is None:
            if not self.satisfied():
                self._elastic = BELOW_MIN
            else:
                self._elastic = AT_MIN if self.active_total() <= self.min_total() else ABOVE_MIN
        return self._elastic

    def has_pending(self) -> bool:
        return any(self.pending.values())


_NO_RANK = Fraction(0)
_LAST_RANK = Fraction(10**18)


def is_gang(job: Job) -> bool:
    """Whether failing one pod fails the job (any leaf needs more than one pod)."""
    if not job.subgroups:
        return job.min_member > 1
    return any((s.min_member or 0) > 1 for s in job.subgroups.values() if not s.children) or (
        len(job.top_subgroups()) > 1
    )
