"""Candidate victims per leaf queue, kept in victim order and shared by every search.

A search reads victims one at a time, most likely victim first, and usually stops after a
few; handing it every candidate job of the cluster (and filtering them all) would cost
each pending job O(jobs). Instead each leaf queue's preemptible jobs that hold something
are kept sorted by victim key, from cycle to cycle (on the state), and refreshed only when
the queue's pods change for good (its settled version: a simulation that is rolled back
changes nothing), job by job.
A search walks these lists lazily through its own filter (:class:`SearchSources`: the
action's per-queue rules, decided queue by queue, and the relevance test of
:mod:`.relevance`).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from gpushare.model import Job, PodStatus
from gpushare.model.quantities import MILLI
from gpushare.scheduler.actions.common.relevance import StepNeeds
from gpushare.scheduler.actions.common.steps import VictimSteps
from gpushare.scheduler.session import Session

#: Per allowed leaf queue, which of its candidate jobs qualify for one search.
LeafFilters = Mapping[str, Callable[[Job], bool]]


class LazyFilters(Mapping[str, Callable[[Job], bool]]):
    """Leaf filters decided queue by queue when first asked for (``decide`` returns None
    for a queue that may not be taken from), so a search that reads a few queues decides
    only those."""

    def __init__(
        self, names: Iterable[str], decide: Callable[[str], Callable[[Job], bool] | None],
        closed: Callable[[str], bool] | None = None,
        group: Callable[[str], str] | None = None,
    ) -> None:
        self._names = names
        self._decide = decide
        self._decided: dict[str, Callable[[Job], bool] | None] = {}
        self._closed = closed
        self._group = group

    def group(self, queue: str) -> str:
        """Leaf queues of one group share the rules' verdict on a victim step of a given
        size (by default each queue is its own group)."""
        return queue if self._group is None else self._group(queue)

    def closed(self, queue: str) -> bool:
        """Whether no leaf queue under ``queue`` may be taken from (False: unknown)."""
        return self._closed is not None and self._closed(queue)

    def get(self, name: str, default: Any = None) -> Any:
        if name not in self._decided:
            self._decided[name] = self._decide(name)
        found = self._decided[name]
        return default if found is None else found

    def __getitem__(self, name: str) -> Callable[[Job], bool]:
        found: Callable[[Job], bool] | None = self.get(name)
        if found is None:
            raise KeyError(name)
        return found

    def __iter__(self) -> Iterator[str]:
        return (name for name in sorted(self._names) if self.get(name) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)

VictimKey = tuple[int, int, float, str]
Entry = tuple[VictimKey, Job]
#: One leaf queue's shared lists, a search's filter on them, and each job's smallest
#: step (a lower bound, per resource).
Source = tuple[list[list[Entry]], Callable[[Job], bool], Mapping[str, tuple[int, int, int]]]


def victim_key(job: Job, elastic_state: int) -> VictimKey:
    """Larger is taken first: the reverse of job order (lowest priority, then a job below
    or at its gang size before one above it, then the newest)."""
    return (-job.priority, elastic_state, job.created_at, job.key)


def _is_active(pod) -> bool:  # type: ignore[no-untyped-def]
    status = pod.status  # identity tests: hashing enum members is slow on hot paths
    return (
        status is PodStatus.RUNNING or status is PodStatus.BINDING
        or status is PodStatus.PIPELINED
    )


_Facts = tuple[int, "tuple[VictimKey, Job] | None", bool, "tuple[int, int, int] | None"]


def _job_facts(session: Session, job: Job) -> _Facts:
    """A job's place in its queue's lists: (pod-set version, entry or None when it holds
    nothing, whether it holds GPUs, the least GPU / CPU / memory of one of its pods)."""
    state = session.state
    key = job.key
    version = state.job_version.get(key, 0)
    if len(job.pods) == 1 and not job.subgroups:  # most jobs: one pod, no gang tree
        pod = state.pods[job.pods[0]]
        if not _is_active(pod):
            return (version, None, False, None)
        h = pod.held()
        entry = (victim_key(job, _elastic_state(1, job.min_member)), job)
        return (version, entry, bool(pod.gpu_indices), (h.gpu, h.cpu, h.mem))
    pods = state.job_pods(job)
    active = [p for p in pods if _is_active(p)]
    if not active:
        return (version, None, False, None)
    held = [p.held() for p in active]
    smallest = (min(h.gpu for h in held), min(h.cpu for h in held), min(h.mem for h in held))
    if job.subgroups:
        elastic = VictimSteps(job, pods, _is_active).elastic_state()
    else:
        elastic = _elastic_state(len(active), job.min_member)
    holds_gpu = any(p.gpu_indices for p in active)
    return (version, (victim_key(job, elastic), job), holds_gpu, smallest)


def _elastic_state(active: int, min_member: int) -> int:
    """0 below its gang size, 1 at it, 2 above it (a job without subgroups)."""
    if active < min_member:
        return 0
    return 2 if active > min_member else 1


class LeafVictims:
    """One leaf queue's candidate jobs in ascending victim key (the next victim last),
    split into jobs holding GPUs and jobs holding none. Never changed once made (the
    searches read the lists in place); the next one is made from it (``before``),
    redoing only the jobs whose pods changed."""

    __slots__ = ("facts", "gpu", "least", "least_gpu", "other", "smallest", "usage",
                 "version")
    gpu: list[Any]
    other: list[Any]

    def __init__(self, session: Session, jobs: Iterable[Job], usage: object, version: int,
                 before: LeafVictims | None = None) -> None:
        self.usage = usage  # the queue's usage record the version belongs to
        self.version = version
        self.facts: dict[str, _Facts] = {}
        state = session.state
        changed: list[tuple[_Facts | None, _Facts | None]] = []
        for job in jobs:
            old = before.facts.get(job.key) if before is not None else None
            if (
                old is not None and old[0] == state.job_version.get(job.key, 0)
                and (old[1] is None or old[1][1] is job)  # the same job, not a new version
            ):
                self.facts[job.key] = old
                continue
            fresh = self.facts[job.key] = _job_facts(session, job)
            changed.append((old, fresh))
        if before is not None:
            # Jobs that left the queue's candidates since (between cycles): drop them.
            for key in sorted(before.facts.keys() - self.facts.keys()):
                changed.append((before.facts[key], None))
        gpu: list[Any]
        other: list[Any]
        if before is None:
            gpu = [f[1] for f in self.facts.values() if f[1] is not None and f[2]]
            other = [f[1] for f in self.facts.values() if f[1] is not None and not f[2]]
            gpu.sort(key=lambda entry: entry[0])
            other.sort(key=lambda entry: entry[0])
        else:
            gpu, other = list(before.gpu), list(before.other)
            for was, now in changed:
                if was is not None and was[1] is not None:
                    _remove(gpu if was[2] else other, was[1])
                if now is not None and now[1] is not None:
                    bisect.insort(gpu if now[2] else other, now[1],
                                  key=lambda entry: entry[0])
        self.gpu = gpu
        self.other = other
        #: Per job, a lower bound on any victim step it offers: the least GPU, CPU and
        #: memory any one of its active pods holds.
        self.smallest = {key: f[3] for key, f in self.facts.items() if f[3] is not None}
        #: A lower bound on any victim step of the queue (least GPU, CPU and memory),
        #: and on any step of its jobs that hold GPUs (the only ones a search that
        #: skips the other list reads).
        self.least = _least(self.smallest.values())
        self.least_gpu = _least(
            f[3] for f in self.facts.values() if f[3] is not None and f[2]
        )


def _least(lows: Iterable[tuple[int, int, int]]) -> tuple[int, int, int] | None:
    rows = list(lows)
    if not rows:
        return None
    return (min(r[0] for r in rows), min(r[1] for r in rows), min(r[2] for r in rows))


def _remove(entries: list[tuple[VictimKey, Job]], entry: tuple[VictimKey, Job]) -> None:
    at = bisect.bisect_left(entries, entry[0], key=lambda item: item[0])
    if at < len(entries) and entries[at][0] == entry[0]:
        del entries[at]


class VictimLists:
    """The per-leaf lists of one cycle (kept on the session, shared by the actions)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        # The state's own index (jobs are neither added nor removed during a cycle).
        self._jobs: Mapping[str, Mapping[str, Job]] = session.state.preemptible_jobs
        # Kept on the state for later cycles: each entry is checked against the usage
        # record and settled version it was made for, and refreshed job by job.
        kept = session.state.kept
        self._leaves = kept.of(VictimLeaves)
        self._holders = kept.gpu_holders
        self._tree: dict[str | None, list[str]] | None = None
        # The least CPU, memory and pod room on any ready node (lowered as placements are
        # committed; evictions are ignored, which only keeps more candidates).
        self.least_free = [0, 0, 0]
        first = True
        for usage in session.state.usage.values():
            if usage.node.ready:
                self._lower(usage, first)
                first = False

    def _lower(self, usage, first: bool = False) -> None:  # type: ignore[no-untyped-def]
        room = (usage.cpu_free_future(), usage.mem_free_future(), usage.pods_free_future())
        least = self.least_free
        for i, value in enumerate(room):
            if first or value < least[i]:
                least[i] = value

    def note_placed(self, nodes: Iterator[str] | list[str]) -> None:
        """Nodes that took pods in a committed decision."""
        usage = self.session.state.usage
        for name in nodes:
            if name in usage and usage[name].node.ready:
                self._lower(usage[name])

    def non_gpu_room_short(self, cpu: int, memory: int, slots: int) -> bool:
        """Whether some node may lack CPU, memory or pod room for a step needing this much
        (if not, victims that hold no GPU free nothing the step lacks)."""
        least = self.least_free
        return cpu > least[0] or memory > least[1] or slots > least[2]

    def gpu_holders(self, node: str) -> dict[int, list[tuple[str, int]]]:
        """Per GPU index of the node, the jobs of the active pods on it and the milli-GPU
        each holds there (remembered until the node's pods change)."""
        usage = self.session.state.usage[node]
        known = self._holders.get(node)
        if known is not None and known[0] is usage and known[1] == usage.settled:
            return known[2]
        holders: dict[int, list[tuple[str, int]]] = {}
        for pod in self.session.state.pods_on(node):
            if not pod.gpu_indices or not _is_active(pod):
                continue
            share = MILLI if pod.gpu.whole else pod.portion
            for i in pod.gpu_indices:
                holders.setdefault(i, []).append((pod.job, share))
        self._holders[node] = (usage, usage.settled, holders)
        return holders

    def lowest_priority(self, queue: str) -> int | None:
        """The lowest priority of a preemptible job of the leaf queue (None: it has none)."""
        jobs = self._jobs.get(queue)
        return min(j.priority for j in jobs.values()) if jobs else None

    def queues(self) -> Iterator[str]:
        """Leaf queues with preemptible jobs."""
        return iter(self._jobs)

    def tree(self) -> dict[str | None, list[str]]:
        """Each queue's children (``None``: the top level), over the leaf queues with
        preemptible jobs and their ancestors, in name order."""
        if self._tree is None:
            queues = self.session.state.queues
            tree: dict[str | None, set[str]] = {}
            for leaf in self._jobs:
                current: str | None = leaf
                while current is not None:
                    parent = queues[current].parent if current in queues else None
                    if parent is not None and parent not in queues:
                        parent = None
                    tree.setdefault(parent, set()).add(current)
                    current = parent
            self._tree = {parent: sorted(kids) for parent, kids in tree.items()}
        return self._tree

    def leaf(self, name: str) -> LeafVictims | None:
        jobs = self._jobs.get(name)
        if not jobs:
            return None
        usage = self.session.state.queue_usage.get(name)
        version = usage.settled if usage is not None else -1
        found = self._leaves.get(name)
        if found is None or found.usage is not usage or found.version != version:
            found = self._leaves[name] = LeafVictims(
                self.session, jobs.values(), usage, version, found
            )
        return found


class VictimLeaves(dict[str, LeafVictims]):
    """Per leaf queue its victim list, kept on the state for later cycles
    (``state.kept.of(VictimLeaves)``); each entry is checked against the usage it was made
    for before it is used again."""


def victim_lists(session: Session) -> VictimLists:
    """The session's lists, made on first use (jobs are neither added nor removed during
    a cycle)."""
    lists = session.made.get(VictimLists)
    if lists is None:
        lists = session.made[VictimLists] = VictimLists(session)
    assert isinstance(lists, VictimLists)
    return lists


class SearchSources(Mapping[str, Source]):
    """One search's candidate sources, per leaf queue, made on first use: the action's
    filter for the queue (``filters``, itself possibly lazy) with the relevance test
    added, over the cycle's shared lists."""

    def __init__(
        self, session: Session, lists: VictimLists, filters: LeafFilters,
        needs: StepNeeds | None, with_other: bool, work: list[int] | None = None,
    ) -> None:
        self.session = session
        self._work = work  # counts one unit per candidate read through the filters
        self.lists = lists
        self._filters = filters
        self._needs = needs
        self._with_other = with_other
        self._made: dict[str, Source | None] = {}

    def get(self, leaf: str, default: Source | None = None) -> Source | None:  # type: ignore[override]
        if leaf in self._made:
            made = self._made[leaf]
            return default if made is None else made
        made = None
        accept = self._filters.get(leaf)
        victims = self.lists.leaf(leaf) if accept is not None else None
        if accept is not None and victims is not None:
            if self._needs is not None:
                accept = _both(accept, self._needs, self.session)
            if self._work is not None:
                accept = _counted(accept, self._work)
            lists = [victims.gpu, victims.other] if self._with_other else [victims.gpu]
            made = (lists, accept, victims.smallest)
        self._made[leaf] = made
        return default if made is None else made

    def __getitem__(self, leaf: str) -> Source:
        made = self.get(leaf)
        if made is None:
            raise KeyError(leaf)
        return made

    def __iter__(self) -> Iterator[str]:
        """The leaf queues the action may take from (in name order)."""
        if isinstance(self._filters, LazyFilters):
            return iter(self._filters)  # already in name order, decided as it goes
        return iter(sorted(self._filters))

    def __len__(self) -> int:
        return len(self._filters)

    def closed(self, queue: str) -> bool:
        """Whether no leaf queue under ``queue`` may be taken from (False: unknown)."""
        return isinstance(self._filters, LazyFilters) and self._filters.closed(queue)

    def group(self, leaf: str) -> str:
        """The leaf's group for shared refusals (:meth:`LazyFilters.group`)."""
        return self._filters.group(leaf) if isinstance(self._filters, LazyFilters) else leaf


def _both(
    accept: Callable[[Job], bool], needs: StepNeeds, session: Session
) -> Callable[[Job], bool]:
    state = session.state

    def both(job: Job) -> bool:
        return accept(job) and any(needs.helps(p) for p in state.job_pods(job))

    return both


def _counted(accept: Callable[[Job], bool], work: list[int]) -> Callable[[Job], bool]:
    def counted(job: Job) -> bool:
        work[0] += 1
        return accept(job)

    return counted
