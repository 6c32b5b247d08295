"""Candidate victims, offered one step at a time in victim order."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction

from gpushare.model import Job, Pod, PodStatus
from gpushare.model.quantities import res_natural
from gpushare.scheduler.victims.ordering import QueueSide, compare_sides, queue_side
from gpushare.scheduler.victims.shares import Quantities, QueueShare, add, zeros
from gpushare.scheduler.victims.steps import VictimSteps


def pod_quantities(pod: Pod) -> Quantities:
    return dict(res_natural(pod.held()))


class _Candidate:
    __slots__ = ("job", "steps")

    def __init__(self, job: Job, steps: VictimSteps):
        self.job = job
        self.steps = steps

    def elastic_state(self) -> int:
        """0 below its gang size, 1 exactly at it, 2 above it (job order: 0 first)."""
        return self.steps.elastic_state()

    def victim_key(self) -> tuple:
        """Larger is taken first: the reverse of job order."""
        job = self.job
        return (-job.priority, self.elastic_state(), job.created_at, job.key)


class VictimQueue:
    """Victim jobs grouped by leaf queue; each pop yields the next victim step."""

    def __init__(
        self,
        jobs: Iterable[tuple[Job, Sequence[Pod]]],
        shares: Mapping[str, QueueShare],
        totals: Mapping[str, Fraction],
        taken: set[str] | None = None,
        protected_core: Callable[[Job], bool] | None = None,
    ):
        self.shares = shares
        self.totals = totals
        self.taken: set[str] = set(taken or ())
        self._protected_core = protected_core
        # Per leaf queue, candidates sorted by victim key (the next victim is the last);
        # only the candidate just taken from changes its key.
        self._by_leaf: dict[str, list[tuple[tuple, _Candidate]]] = {}
        self._popped: dict[str, Quantities] = {}
        for job, pods in jobs:
            candidate = _Candidate(job, VictimSteps(job, pods, self._is_active))
            self._by_leaf.setdefault(job.queue, []).append((candidate.victim_key(), candidate))
        for entries in self._by_leaf.values():
            entries.sort(key=lambda entry: entry[0])
        self._children: dict[str | None, list[str]] = {}
        self._memo_victims: dict[str, Quantities] = {}
        self._memo_pick: dict[str | None, str | None] = {}
        self._memo_compare: dict[tuple, tuple[Quantities, Quantities, int]] = {}
        self._memo_side: dict[str, tuple[Quantities, QueueSide]] = {}
        for leaf in sorted(self._by_leaf):
            self._link(leaf)

    def _is_active(self, pod: Pod) -> bool:
        status = pod.status  # identity tests: hashing enum members is slow on hot paths
        return (
            status is PodStatus.RUNNING or status is PodStatus.BINDING
            or status is PodStatus.PIPELINED
        ) and pod.key not in self.taken

    def _link(self, name: str) -> None:
        current: str | None = name
        while current is not None:
            parent = self.shares[current].parent if current in self.shares else None
            if parent is not None and parent not in self.shares:
                parent = None
            kids = self._children.setdefault(parent, [])
            if current in kids:
                return
            kids.append(current)
            kids.sort()
            current = parent

    def _has_candidates(self, name: str) -> bool:
        if self._by_leaf.get(name):
            return True
        return any(self._has_candidates(k) for k in self._children.get(name, ()))

    def _next_candidate(self, leaf: str) -> _Candidate:
        return self._by_leaf[leaf][-1][1]

    def _victims_of(self, name: str) -> Quantities:
        """What a queue would have given up: its popped victims plus its next candidate
        job (for a parent queue, those of the child it would give up from first)."""
        cached = self._memo_victims.get(name)
        if cached is not None:
            return cached
        if name in self._by_leaf:
            out = dict(self._popped.get(name, zeros()))
            nxt = self._next_candidate(name)
            for pod in nxt.steps._all_active(nxt.steps.root):
                out = add(out, pod_quantities(pod))
        else:
            child = self._pick_child(name)
            out = self._victims_of(child) if child is not None else zeros()
        self._memo_victims[name] = out
        return out

    def _pick_child(self, parent: str | None) -> str | None:
        if parent in self._memo_pick:
            return self._memo_pick[parent]
        worst = self._pick_child_uncached(self._children.get(parent, []))
        self._memo_pick[parent] = worst
        return worst

    def _pick_child_uncached(self, names: list[str]) -> str | None:
        live = [n for n in names if self._has_candidates(n)]
        if not live:
            return None
        worst = live[0]
        for name in live[1:]:
            # The victim queue takes from the queue that queue order would serve last.
            if self._compare(worst, name) < 0:
                worst = name
        return worst

    def _compare(self, left: str, right: str) -> int:
        """Queue order of two queues with their victims. Remembered across pops: a queue's
        figures are frozen here and its victims are a new mapping whenever they change
        (the mappings are held in the memo, so an identity is never reused)."""
        lv, rv = self._victims_of(left), self._victims_of(right)
        key = (left, right, id(lv), id(rv))
        hit = self._memo_compare.get(key)
        if hit is not None and hit[0] is lv and hit[1] is rv:
            return hit[2]
        cmp = compare_sides(
            self.shares[left], self._side(left, lv), self.shares[right], self._side(right, rv)
        )
        self._memo_compare[key] = (lv, rv, cmp)
        return cmp

    def _side(self, name: str, victims: Quantities) -> QueueSide:
        hit = self._memo_side.get(name)
        if hit is not None and hit[0] is victims:
            return hit[1]
        side = queue_side(self.shares[name], self.totals, victims=victims)
        self._memo_side[name] = (victims, side)
        return side

    def _forget(self, leaf: str) -> None:
        """Only the queue just taken from (and its ancestors) has new figures."""
        current: str | None = leaf
        while current is not None:
            self._memo_victims.pop(current, None)
            parent = self.shares[current].parent if current in self.shares else None
            if parent is not None and parent not in self.shares:
                parent = None
            self._memo_pick.pop(parent, None)
            current = parent

    def _pick_leaf(self) -> str | None:
        name = self._pick_child(None)
        while name is not None and name not in self._by_leaf:
            name = self._pick_child(name)
        return name

    def pop(self) -> tuple[Job, list[Pod]] | None:
        """The next victim step, or None when no candidate is left."""
        while True:
            leaf = self._pick_leaf()
            if leaf is None:
                return None
            entries = self._by_leaf[leaf]
            self._forget(leaf)
            _, candidate = entries.pop()
            if self._protected_core is not None and self._protected_core(candidate.job):
                pods = candidate.steps.surplus_only()
            else:
                pods = candidate.steps.next_step()
            if pods:
                for pod in pods:
                    self.taken.add(pod.key)
                    self._popped[leaf] = add(self._popped.get(leaf, zeros()), pod_quantities(pod))
                if candidate.steps.active_count():
                    bisect.insort(entries, (candidate.victim_key(), candidate),
                                  key=lambda entry: entry[0])
            if not entries:
                del self._by_leaf[leaf]
            if pods:
                return candidate.job, pods
