"""Candidate victims, offered one step at a time in victim order."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any, cast

from gpushare.model import Job, Pod, PodStatus
from gpushare.model.quantities import Quantities, add, res_natural, zeros
from gpushare.scheduler.actions.common.candidates import Entry, Source, VictimKey, victim_key
from gpushare.scheduler.actions.common.ordering import QueueSide, compare_sides, queue_side
from gpushare.scheduler.actions.common.steps import VictimSteps
from gpushare.scheduler.plugins.proportion.resource_share import QueueShare


def pod_quantities(pod: Pod) -> Quantities:
    return dict(res_natural(pod.held()))


#: The victims of a queue nothing was taken from (shared; never changed in place).
_NOTHING: Quantities = zeros()


class _Candidate:
    __slots__ = ("job", "steps")

    def __init__(self, job: Job, steps: VictimSteps):
        self.job = job
        self.steps = steps

    def elastic_state(self) -> int:
        """0 below its gang size, 1 exactly at it, 2 above it (job order: 0 first)."""
        return self.steps.elastic_state()

    def victim_key(self) -> VictimKey:
        return victim_key(self.job, self.elastic_state())


class _Leaf:
    """One leaf queue's candidates for one search: the shared lists (each ascending, next
    victim last) read from the end through the search's filter, merged with this search's
    own entries (jobs taken from before, re-keyed)."""

    __slots__ = ("_accept", "_caps", "_cursors", "_extra", "_lists", "_make", "_smallest",
                 "_top")

    def __init__(
        self, lists: list[list[Entry]], accept: Callable[[Job], bool],
        make: Callable[[Job], _Candidate],
        smallest: Mapping[str, tuple[int, int, int]] | None = None,
        caps: list[tuple[int, int, int]] | None = None,
    ) -> None:
        self._lists = lists
        self._cursors = [len(entries) for entries in lists]
        self._accept = accept
        self._make = make
        self._smallest = smallest or {}
        # Refused step sizes: jobs whose every step holds at least one of them are
        # skipped. Shared by the leaves whose verdicts are shared (see VictimQueue.refuse).
        self._caps: list[tuple[int, int, int]] = [] if caps is None else caps
        self._extra: list[tuple[VictimKey, _Candidate]] = []
        self._top: tuple[int, _Candidate] | None = None

    def recheck_top(self) -> None:
        """A cap was added: drop the remembered next candidate if it is now skipped."""
        if self._top is not None and self._top[0] >= 0 and self._capped(self._top[1].job):
            self._top = None

    def _capped(self, job: Job) -> bool:
        low = self._smallest.get(job.key)
        if low is None:
            return False
        return any(
            low[0] >= cap[0] and low[1] >= cap[1] and low[2] >= cap[2] for cap in self._caps
        )

    def _takes(self, job: Job) -> bool:
        # The size test first: it is a lookup, the filter may test relevance.
        return not (self._caps and self._capped(job)) and self._accept(job)

    def push(self, candidate: _Candidate) -> None:
        bisect.insort(self._extra, (candidate.victim_key(), candidate),
                      key=lambda entry: entry[0])
        self._top = None

    def peek(self) -> _Candidate | None:
        if self._top is not None:
            return self._top[1]
        best: VictimKey | None = None
        source = -1
        for i, entries in enumerate(self._lists):
            at = self._cursors[i]
            while at > 0 and not self._takes(entries[at - 1][1]):
                at -= 1
            self._cursors[i] = at
            if at > 0 and (best is None or entries[at - 1][0] > best):
                best, source = entries[at - 1][0], i
        if self._extra and (best is None or self._extra[-1][0] > best):
            self._top = (-1, self._extra[-1][1])
        elif best is not None:
            entries = self._lists[source]
            self._top = (source, self._make(entries[self._cursors[source] - 1][1]))
        else:
            return None
        return self._top[1]

    def pop(self) -> _Candidate | None:
        candidate = self.peek()
        if candidate is None or self._top is None:
            return None
        source = self._top[0]
        self._top = None
        if source < 0:
            self._extra.pop()
        else:
            self._cursors[source] -= 1
        return candidate


class VictimQueue:
    """Victim jobs grouped by leaf queue; each pop yields the next victim step.

    ``sources`` gives, per leaf queue that may be taken from, the shared candidate lists
    and the search's filter on them: a mapping read lazily (``get``), so that a leaf
    queue's candidates are looked at only when the queue is picked. ``tree`` lists each
    queue's children (``None``: the top level) over the leaves that may appear; without
    it the tree is made from the mapping's keys. ``pods_of`` gives a job's pods. Pods in
    ``taken`` were already taken by the search: their jobs offer only their other pods,
    in the order that leaves them; with ``count_taken`` they also count among what their
    queue gave up when queues are compared.
    """

    def __init__(
        self,
        sources: Mapping[str, Source],
        pods_of: Callable[[Job], Sequence[Pod]],
        shares: Mapping[str, QueueShare],
        totals: Mapping[str, Fraction],
        taken: Sequence[Pod] = (),
        jobs: Mapping[str, Job] | None = None,
        protected_core: Callable[[Job], bool] | None = None,
        lookahead: bool = True,
        count_taken: bool = False,
        untaken: dict[tuple[int, int], tuple[QueueShare, QueueShare, int]] | None = None,
        tree: Mapping[str | None, list[str]] | None = None,
    ):
        # Comparisons of queues nothing was taken from, shared by the searches of an
        # action (keyed by the identity of the figures, which the entries hold).
        self._untaken = untaken
        self.shares = shares
        # KAI compares queues as if their next victim were already gone, which means
        # reading every queue's next candidate before each pick; without look-ahead a
        # queue is compared as it stands (less what was taken from it), and only the
        # queue picked has its candidates read.
        self._lookahead = lookahead
        self._dead: set[str] = set()
        self.totals = totals
        self.taken: set[str] = {p.key for p in taken}
        self._protected_core = protected_core
        self._pods_of = pods_of
        self._sources = sources
        self._jobs = jobs or {}
        self._taken_jobs = {p.job for p in taken}
        self._taken_by_leaf: dict[str, list[str]] = {}
        for key in sorted(self._taken_jobs):
            job = self._jobs.get(key)
            if job is not None:
                self._taken_by_leaf.setdefault(job.queue, []).append(key)
        self._by_leaf: dict[str, _Leaf | None] = {}
        self._popped: dict[str, Quantities] = {}
        self._touched: set[str | None] = set()  # parents of queues something was taken from
        self._memo_victims: dict[str, Quantities] = {}
        self._memo_pick: dict[str | None, str | None] = {}
        self._memo_compare: dict[tuple[Any, ...], tuple[Quantities, Quantities, int]] = {}
        self._memo_side: dict[str, tuple[Quantities, QueueSide]] = {}
        self._live: dict[str, bool] = {}
        # Leaves whose refusals are shared: a step the rules refuse from one is refused
        # from any leaf of its group (the sources say which; by default each leaf alone).
        group_of = getattr(sources, "group", None)
        self._group_of: Callable[[str], str] = group_of if group_of is not None else str
        self._caps: dict[str, list[tuple[int, int, int]]] = {}
        self._groups: dict[str, list[str]] = {}
        if tree is not None:
            self._children: Mapping[str | None, list[str]] = tree
        else:
            self._children = {}
            for leaf in sorted(sources):
                self._link(leaf)
        # Jobs taken from before sit in their leaf's own entries from the start.
        for leaf in sorted(self._taken_by_leaf):
            self._view(leaf)
        if count_taken:
            # KAI starts each round of a gang's search with a fresh victim queue in which
            # the victims of earlier rounds come out again (skipped, being victims
            # already) and so count among what their queue gave up: a queue already
            # taken from compares as the smaller one, and the next victim comes from a
            # sibling. Their pods are counted as given up from the start.
            for pod in taken:
                job = self._jobs.get(pod.job)
                if job is not None:
                    self._popped[job.queue] = add(
                        self._popped.get(job.queue, zeros()), pod_quantities(pod)
                    )

    def _make(self, job: Job) -> _Candidate:
        return _Candidate(job, VictimSteps(job, self._pods_of(job), self._is_active))

    def _view(self, leaf: str) -> _Leaf | None:
        """The leaf queue's candidates for this search, read on first use (None: the
        queue may not be taken from)."""
        if leaf in self._by_leaf:
            return self._by_leaf[leaf]
        source = self._sources.get(leaf)
        if source is None:
            self._by_leaf[leaf] = None
            self._dead.add(leaf)
            return None
        lists, accept, smallest = source
        group = self._group_of(leaf)
        caps = self._caps.setdefault(group, [])
        self._groups.setdefault(group, []).append(leaf)
        if self._taken_jobs:
            taken_jobs = self._taken_jobs

            def fresh(job: Job, accept: Callable[[Job], bool] = accept) -> bool:
                return job.key not in taken_jobs and accept(job)

            view = _Leaf(lists, fresh, self._make, smallest, caps)
        else:
            view = _Leaf(lists, accept, self._make, smallest, caps)
        self._by_leaf[leaf] = view
        for key in self._taken_by_leaf.get(leaf, ()):
            job = self._jobs[key]
            if accept(job):
                candidate = self._make(job)
                if candidate.steps.active_count():
                    view.push(candidate)
        return view

    def _is_active(self, pod: Pod) -> bool:
        status = pod.status  # identity tests: hashing enum members is slow on hot paths
        return (
            status is PodStatus.RUNNING or status is PodStatus.BINDING
            or status is PodStatus.PIPELINED
        ) and pod.key not in self.taken

    def _is_leaf(self, name: str | None) -> bool:
        return name is not None and name not in self._children

    def _link(self, name: str) -> None:
        children: dict[str | None, list[str]] = self._children  # type: ignore[assignment]
        current: str | None = name
        while current is not None:
            parent = self._parent(current)
            kids = children.setdefault(parent, [])
            if current in kids:
                return
            kids.append(current)
            kids.sort()
            current = parent

    def _has_candidates(self, name: str) -> bool:
        if self._is_leaf(name):
            if not self._lookahead:
                return name not in self._dead
            view = self._view(name)
            return view is not None and view.peek() is not None
        live = self._live.get(name)
        if live is None:
            closed = getattr(self._sources, "closed", None)
            live = self._live[name] = not (closed is not None and closed(name)) and any(
                self._has_candidates(k) for k in self._children.get(name, ())
            )
        return live

    def _next_candidate(self, leaf: str) -> _Candidate:
        view = self._view(leaf)
        candidate = view.peek() if view is not None else None
        assert candidate is not None
        return candidate

    def _victims_of(self, name: str) -> Quantities:
        """What a queue would have given up: its popped victims plus its next candidate
        job (for a parent queue, those of the child it would give up from first)."""
        cached = self._memo_victims.get(name)
        if cached is not None:
            return cached
        if not self._lookahead and name not in self._touched and not self._is_leaf(name):
            return _NOTHING  # nothing taken under it: whichever child, nothing given up
        if self._is_leaf(name):
            popped = self._popped.get(name, _NOTHING)
            if not self._lookahead:
                self._memo_victims[name] = popped
                return popped
            out = dict(popped)
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
        if lv is _NOTHING and rv is _NOTHING and self._untaken is not None:
            sl, sr = self.shares[left], self.shares[right]
            pair = (id(sl), id(sr))
            known = self._untaken.get(pair)
            if known is not None and known[0] is sl and known[1] is sr:
                return known[2]
            cmp = compare_sides(sl, self._side(left, lv), sr, self._side(right, rv))
            self._untaken[pair] = (sl, sr, cmp)
            return cmp
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
        if victims is _NOTHING:
            # Nothing taken yet: the side is the queue's own, kept with its figures for
            # every search that meets the same figures.
            share = self.shares[name]
            kept = share.derived.get("untaken_side")
            if kept is not None and kept[0] is self.totals:  # type: ignore[index]
                return cast(QueueSide, kept[1])  # type: ignore[index]
            side = queue_side(share, self.totals)
            share.derived["untaken_side"] = (self.totals, side)
            return side
        hit = self._memo_side.get(name)
        if hit is not None and hit[0] is victims:
            return hit[1]
        side = queue_side(self.shares[name], self.totals, victims=victims)
        self._memo_side[name] = (victims, side)
        return side

    def _parent(self, name: str) -> str | None:
        """The queue's parent among the known queues (None: the top level)."""
        parent = self.shares[name].parent if name in self.shares else None
        return parent if parent is not None and parent in self.shares else None

    def _touch(self, leaf: str) -> None:
        """Mark the ancestors of a queue something was taken from."""
        current: str | None = leaf
        while current is not None:
            parent = self._parent(current)
            if parent is not None:
                self._touched.add(parent)
            current = parent

    def _forget(self, leaf: str, dead: bool = False) -> None:
        """Only the queue just taken from (and its ancestors) has new figures. When the
        queue turned out to have no candidate (``dead``), its parent picks again, and
        further up only while a queue's own figures for the pick may have changed (it
        died too, or something was taken under it, so its victims follow its pick)."""
        current: str | None = leaf
        while current is not None:
            self._memo_victims.pop(current, None)
            self._live.pop(current, None)
            parent = self._parent(current)
            self._memo_pick.pop(parent, None)
            if dead and parent is not None:
                self._live.pop(parent, None)
                if parent not in self._touched and self._has_candidates(parent):
                    self._memo_victims.pop(parent, None)
                    return
            current = parent

    def _pick_leaf(self) -> str | None:
        name = self._pick_child(None)
        while name is not None and not self._is_leaf(name):
            name = self._pick_child(name)
        return name

    def refuse(self, leaf: str, pods: Sequence[Pod]) -> None:
        """The rules refused this step from ``leaf`` on its own: a step at least as large
        (GPU, CPU and memory) from the same queue, or from a queue of its group, would be
        refused too, so skip those."""
        if self._by_leaf.get(leaf) is None:
            return
        group = self._group_of(leaf)
        held = [p.held() for p in pods]
        self._caps[group].append((sum(h.gpu for h in held), sum(h.cpu for h in held),
                                  sum(h.mem for h in held)))
        for member in self._groups[group]:
            view = self._by_leaf[member]
            if view is not None:
                view.recheck_top()
                if self._lookahead or member == leaf:
                    self._forget(member)

    def pop(self) -> tuple[Job, list[Pod]] | None:
        """The next victim step, or None when no candidate is left."""
        while True:
            leaf = self._pick_leaf()
            if leaf is None:
                return None
            view = self._view(leaf)
            candidate = view.pop() if view is not None else None
            if candidate is None:
                self._dead.add(leaf)  # found out only now without look-ahead
                self._forget(leaf, dead=True)
                continue
            self._forget(leaf)
            if self._protected_core is not None and self._protected_core(candidate.job):
                pods = candidate.steps.surplus_only()
            else:
                pods = candidate.steps.next_step()
            if pods:
                self._touch(leaf)
                for pod in pods:
                    self.taken.add(pod.key)
                    self._popped[leaf] = add(self._popped.get(leaf, zeros()), pod_quantities(pod))
                if candidate.steps.active_count():
                    assert view is not None  # a candidate came out of this leaf's view
                    view.push(candidate)
                return candidate.job, pods
