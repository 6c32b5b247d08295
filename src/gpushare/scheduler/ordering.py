"""Orders: queues (hierarchical, fair-share aware), jobs inside a queue, tasks in a job.

:class:`JobQueue` hands out jobs the way KAI's allocate and eviction actions consume them:
walk the queue tree from the roots, at each level take the best child (compared using the
best job of each), down to a leaf, then pop that leaf's best job. Because allocations
change the figures, the order is re-evaluated at every pop.
"""

from __future__ import annotations

import functools
import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator
from fractions import Fraction
from typing import Any, cast

from gpushare.model.job import Job
from gpushare.model.pod import Pod
from gpushare.model.quantities import F0, MILLI, Vec, vadd
from gpushare.scheduler.gang import GangView
from gpushare.scheduler.session import OrderFigures, Session

JobKey = tuple[int, int, float, str]


def job_order_key(session: Session, job: Job, gang: GangView | None = None) -> JobKey:
    """Higher (aged) priority first; below its gang minimum, then at it, then above; older;
    name."""
    gang = gang or session.gang(job)
    return (-order_priority(session, job), gang.elastic_state(), job.created_at, job.key)


def order_priority(session: Session, job: Job) -> int:
    """The priority the job orders by inside its queue: its own, plus with ``jobAging``
    one point per whole step it has waited (from :meth:`Job.waiting_since`), capped."""
    aging = session.config.job_aging
    if aging is None:
        return job.priority
    step, cap = aging
    waited = session.now - job.waiting_since()
    if waited < step:
        return job.priority
    return job.priority + min(cap, int(waited // step))


def job_init_request(session: Session, job: Job) -> Vec:
    """What the job's next step asks for (memory-sized GPU requests at the smallest GPU)."""
    step = session.gang(job).next_step() or []
    return session.step_request(step, session.min_gpu_memory)


def compare_queues(
    session: Session, left: str, right: str, left_job: Job | None, right_job: Job | None,
    left_victims: Vec | None = None, right_victims: Vec | None = None,
) -> int:
    """Negative when ``left`` goes first (KAI's queue order, criterion by criterion)."""
    shares = session.proportion
    l_over, r_over = shares.over_fair_share(left), shares.over_fair_share(right)
    if l_over != r_over:
        return 1 if l_over else -1
    l_req = job_init_request(session, left_job) if left_job else (F0, F0, F0)
    r_req = job_init_request(session, right_job) if right_job else (F0, F0, F0)
    l_starved = shares.within_deserved(left, l_req)
    r_starved = shares.within_deserved(right, r_req)
    if l_starved != r_starved:
        return -1 if l_starved else 1
    lq, rq = session.state.queues[left], session.state.queues[right]
    if lq.priority != rq.priority:
        return -1 if lq.priority > rq.priority else 1
    l_with, r_with = vadd(shares.allocated(left), l_req), vadd(shares.allocated(right), r_req)
    l_zero, r_zero = _zero_share_violation(session, left, l_with), _zero_share_violation(
        session, right, r_with
    )
    if l_zero != r_zero:
        return 1 if l_zero else -1
    if left_victims is not None:
        l_with = tuple(a - b for a, b in zip(l_with, left_victims, strict=True))  # type: ignore[assignment]
    if right_victims is not None:
        r_with = tuple(a - b for a, b in zip(r_with, right_victims, strict=True))  # type: ignore[assignment]
    c = _cmp(shares.drf_share(left, l_with), shares.drf_share(right, r_with))
    if c:
        return c
    c = _cmp(
        shares.drf_share(left, shares.allocated(left)),
        shares.drf_share(right, shares.allocated(right)),
    )
    if c:
        return c
    la, ra = shares.allocatable_share(left), shares.allocatable_share(right)
    if _pareto_less(la, ra):
        return -1
    if _pareto_less(ra, la):
        return 1
    if lq.created_at != rq.created_at:
        return -1 if lq.created_at < rq.created_at else 1
    return -1 if left < right else (1 if left > right else 0)


def _cmp(a: Fraction, b: Fraction) -> int:
    return -1 if a < b else (1 if a > b else 0)


def _zero_share_violation(session: Session, name: str, allocated_with_job: Vec) -> bool:
    share = session.proportion.allocatable_share(name)
    return any(share[i] == 0 and allocated_with_job[i] > 0 for i in range(3))


def _pareto_less(a: Vec, b: Vec) -> bool:
    """``a`` no larger than ``b`` everywhere (-1 is unlimited) and smaller somewhere."""

    def le(x: Fraction, y: Fraction) -> bool:
        if x == -1:
            return y == -1
        return y == -1 or x <= y

    return all(le(a[i], b[i]) for i in range(3)) and not all(le(b[i], a[i]) for i in range(3))


class _ExactJobQueue:
    """The reference implementation of :class:`JobQueue`: every comparison exact, every
    pop re-sorts everything. Used for victim order (``reverse=True``) and in tests."""

    def __init__(
        self,
        session: Session,
        jobs: Iterable[Job],
        job_key: Callable[[Job], object] | None = None,
        reverse: bool = False,
    ) -> None:
        self.session = session
        self.reverse = reverse
        self._job_key = job_key or (lambda job: job_order_key(session, job))
        self._by_leaf: dict[str, list[Job]] = {}
        for job in jobs:
            self.push(job)

    def push(self, job: Job) -> None:
        self._by_leaf.setdefault(job.queue, []).append(job)

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_leaf.values())

    def empty(self) -> bool:
        return not any(self._by_leaf.values())

    def _best_job(self, leaf: str) -> Job | None:
        jobs = self._by_leaf.get(leaf)
        if not jobs:
            return None
        pick = max if self.reverse else min
        return pick(jobs, key=self._job_key)  # type: ignore[arg-type]

    def pop(self) -> Job | None:
        state = self.session.state
        live = {q for q, jobs in self._by_leaf.items() if jobs}
        if not live:
            return None
        # Queues that lead to a leaf holding candidates.
        useful: set[str] = set()
        for leaf in live:
            useful.update(state.ancestors(leaf))
        best_job_cache: dict[str, Job | None] = {}

        def best_job(name: str) -> Job | None:
            if name in best_job_cache:
                return best_job_cache[name]
            queue = state.queues[name]
            kids = [k for k in queue.children if k in useful]
            result = best_job(choose(kids)) if kids else self._best_job(name)
            best_job_cache[name] = result
            return result

        def choose(names: list[str]) -> str:
            def cmp(a: str, b: str) -> int:
                c = compare_queues(self.session, a, b, best_job(a), best_job(b))
                return -c if self.reverse else c

            return sorted(names, key=functools.cmp_to_key(cmp))[0]

        roots = sorted(q for q in useful if not state.queues[q].parent
                       or state.queues[q].parent not in state.queues)
        if not roots:
            return None
        job = best_job(choose(roots))
        if job is not None:
            self._by_leaf[job.queue].remove(job)
        return job


def step_units(session: Session, pods: list[Pod]) -> tuple[int | Fraction, int, int]:
    """A step's request in the state's units (milli-GPUs, millicores, bytes); memory-sized
    GPU requests at the smallest GPU, exactly."""
    gpu: int | Fraction = 0
    cpu = mem = 0
    for pod in pods:
        g = pod.gpu
        if g.whole:
            gpu += g.whole * MILLI
        elif g.portion:
            gpu += g.portion * g.devices
        elif g.memory_mib and session.min_gpu_memory:
            gpu += Fraction(g.memory_mib * g.devices * MILLI, session.min_gpu_memory)
        cpu += pod.cpu_millis
        mem += pod.memory_bytes
    return gpu, cpu, mem


def _within(a: tuple[int, int, int], req: tuple[Any, ...],
            floor: tuple[int | None, ...], quota: tuple[Fraction | None, ...]) -> bool:
    """``a + req`` within the quota (in units) everywhere: an integer against the quota's
    floor, which is exact, a fraction (a memory-sized GPU request) against the quota."""
    for i in range(3):
        q = floor[i]
        if q is None:
            continue
        w = a[i] + req[i]
        if (w > q) if type(w) is int else (w > quota[i]):
            return False
    return True


def _exact_share(units: tuple[Any, ...], zero: tuple[bool, ...],
                 share: tuple[int | Fraction, ...]) -> Fraction:
    """The dominant share of ``units`` exactly, as ``Proportion.drf_share`` gives it for the
    same amount in natural units (``share``: the allocatable share in units)."""
    best = F0
    for i in range(3):
        w = units[i]
        if zero[i]:
            value = Fraction(w * (1 if i == 0 else MILLI))  # allocated x 1000, natural units
        elif type(w) is int and type(share[i]) is int:
            value = Fraction(w, share[i])
        else:
            value = Fraction(w) / share[i]
        if value > best:
            best = value
    return best


_CLOSE = 1e-9  # relative: floats nearer than this are compared exactly


def _near(key: tuple[Any, ...], top: tuple[Any, ...]) -> bool:
    """Whether two queue keys agree but for dominant shares the floats cannot tell apart."""
    if key[:4] != top[:4]:
        return False
    a, b = key[4], top[4]
    return bool(abs(a - b) <= _CLOSE * max(abs(a), abs(b)))


class JobQueue:
    """Jobs waiting for an action, handed out in fair order (see module doc).

    ``jobs`` are the candidates; ``push`` puts a job back (it competes again); ``pop``
    returns the next job or None. Figures are cached against the state's version counters,
    so a pop costs a walk down the tree over cached keys; anything that changes (a job's
    pods, a queue's allocation) is recomputed. ``reverse=True`` (victim order) uses the
    exact reference implementation.
    """

    def __new__(cls, session: Session, jobs: Iterable[Job],
                job_key: Callable[[Job], object] | None = None, reverse: bool = False) -> Any:
        if reverse or job_key is not None:
            return _ExactJobQueue(session, jobs, job_key, reverse)
        return super().__new__(cls)

    def __init__(self, session: Session, jobs: Iterable[Job],
                 job_key: Callable[[Job], object] | None = None, reverse: bool = False) -> None:
        self.session = session
        self.state = session.state
        self.fig: OrderFigures = _figures(session)
        self._heaps: dict[str, list[Any]] = {}
        self._seq = itertools.count()
        self._count = 0
        # key -> (version, order, req)
        self._job_cache: dict[str, tuple[int, object, tuple[Any, ...]]] = {}
        self._queue_cache: dict[str, tuple[Any, ...]] = {}
        self._exact_cache: dict[str, tuple[tuple[int, int], tuple[Any, ...]]] = {}
        # Per queue: candidates in its subtree, a local change counter (pushes and pops in
        # the subtree) and the best job found last time, valid while neither that counter
        # nor the state's version of the queue (any change below it) has moved.
        self._sub_count: dict[str, int] = {}
        self._epoch: dict[str, int] = {}
        self._best_cache: dict[str, tuple[int, int, Job | None]] = {}
        # Per parent queue (None: the top level), a heap of its children by queue key,
        # each entry stamped with the child's (usage version, epoch) when keyed; entries
        # whose stamp is out of date are dropped as they surface. A child whose stamp
        # moves is marked dirty under its parent and keyed again before the next choice:
        # through this queue's own pushes and pops, and through the state's log of
        # queues whose usage changed (allocations, evictions, simulations).
        self._choice: dict[str | None, list[tuple[tuple[Any, ...], str, tuple[int, int]]]] = {}
        self._dirty: dict[str | None, set[str]] = {}
        self._keyed: dict[str, tuple[int, int]] = {}  # child -> stamp of its newest entry
        self._parent: dict[str, str | None] = {}
        self._links: dict[str, tuple[tuple[str, str | None], ...]] = {}  # leaf -> (queue, parent)
        self._log_pos = len(self.state.queue_log)
        for job in jobs:
            self.push(job)

    def __len__(self) -> int:
        return self._count

    def empty(self) -> bool:
        return self._count == 0

    def _job_info(self, job: Job) -> tuple[object, tuple[Any, ...]]:
        version = self.state.job_version.get(job.key, 0)
        cached = self._job_cache.get(job.key)
        if cached is not None and cached[0] == version:
            return cached[1], cached[2]
        gang = self.session.gang(job)
        order = (-order_priority(self.session, job), gang.elastic_state(), job.created_at,
                 job.key)
        req = step_units(self.session, gang.next_step() or [])
        self._job_cache[job.key] = (version, order, req)
        return order, req

    def push(self, job: Job) -> None:
        order, _ = self._job_info(job)
        heapq.heappush(self._heaps.setdefault(job.queue, []),
                       (order, next(self._seq), job, self.state.job_version.get(job.key, 0)))
        self._count += 1
        self._touch(job.queue, +1)

    def _touch(self, leaf: str, delta: int) -> None:
        links = self._links.get(leaf)
        if links is None:
            chain = self.state.ancestors(leaf) or [leaf]
            links = self._links[leaf] = tuple(zip(chain, [*chain[1:], None], strict=True))
        sub_count, epoch, dirty = self._sub_count, self._epoch, self._dirty
        for name, parent in links:
            sub_count[name] = sub_count.get(name, 0) + delta
            epoch[name] = epoch.get(name, 0) + 1
            self._parent[name] = parent
            marked = dirty.get(parent)
            if marked is None:
                dirty[parent] = {name}
            else:
                marked.add(name)

    def _catch_up(self) -> None:
        """Mark dirty the queues whose usage changed since the last pop."""
        log = self.state.queue_log
        if self._log_pos > len(log):  # a new cycle began: everything may have changed
            self._log_pos = 0
            for name, parent in self._parent.items():
                self._dirty.setdefault(parent, set()).add(name)
            for leaf in sorted(self._heaps):
                self._rekey(leaf)
        if self._log_pos == len(log):
            return
        known = self._parent
        for leaf in sorted(set(log[self._log_pos:])):
            if leaf in self._heaps:
                self._rekey(leaf)
            # The leaf may hold none of these jobs while its ancestors do.
            for name in self.state.ancestors(leaf):
                if name in known:
                    self._dirty.setdefault(known[name], set()).add(name)
        self._log_pos = len(log)

    def _rekey(self, leaf: str) -> None:
        """Jobs of the leaf whose pods changed get their place in its heap again (a job
        evicted from or placed into meanwhile may move anywhere in job order)."""
        heap = self._heaps[leaf]
        versions = self.state.job_version
        moved = False
        for i, (_order, _seq, job, version) in enumerate(heap):
            now = versions.get(job.key, 0)
            if now != version:
                heap[i] = (self._job_info(job)[0], next(self._seq), job, now)
                moved = True
        if moved:
            heapq.heapify(heap)

    def _stamp(self, name: str) -> tuple[int, int]:
        qu = self.state.queue_usage.get(name)
        return (qu.version if qu is not None else 0, self._epoch.get(name, 0))

    def _top(self, leaf: str) -> Job | None:
        heap = self._heaps.get(leaf)
        while heap:
            _order, _, job, version = heap[0]
            if version == self.state.job_version.get(job.key, 0):
                return cast(Job, job)
            heapq.heapreplace(heap, (self._job_info(job)[0], next(self._seq), job,
                                     self.state.job_version.get(job.key, 0)))
        return None

    def _queue_key(self, name: str, job: Job) -> tuple[Any, ...]:
        qu = self.state.queue_usage[name]
        jv = self.state.job_version.get(job.key, 0)
        cached = self._queue_cache.get(name)
        if cached is not None and cached[0] == qu.version and cached[1] is job and cached[2] == jv:
            return cast(tuple[Any, ...], cached[3])
        _, req = self._job_info(job)
        fig = self.fig
        a = (qu.allocated.gpu, qu.allocated.cpu, qu.allocated.mem)
        ff = fig.fair_floor[name]
        over = a[0] > ff[0] and a[1] > ff[1] and a[2] > ff[2]
        starved = _within(a, req, fig.quota_floor[name], fig.quota[name])
        zero = fig.alloc_zero[name]
        share = fig.alloc_share[name]
        violation = any(zero[i] and a[i] + req[i] > 0 for i in range(3))
        with_job = 0.0
        without = 0.0
        for i in range(3):
            w, o = a[i] + req[i], a[i]
            if zero[i]:
                factor = 1 if i == 0 else MILLI  # allocated x 1000 in natural units
                w_share, o_share = float(w) * factor, float(o) * factor
            else:
                w_share, o_share = float(w) / share[i], o / share[i]
            with_job = max(with_job, w_share)
            without = max(without, o_share)
        key = (over, not starved, -self.state.queues[name].priority, violation, with_job, without)
        self._queue_cache[name] = (qu.version, job, jv, key)
        return key

    def pop(self) -> Job | None:
        if self._count == 0:
            return None
        self._catch_up()
        top = self._choose(None)
        job = self._best(top) if top is not None else None
        if job is None:
            return None
        heap = self._heaps[job.queue]
        if heap[0][2] is job:  # the leaf's best is its heap's top (``_top``)
            heapq.heappop(heap)
        else:
            for i, entry in enumerate(heap):
                if entry[2] is job:
                    heap[i] = heap[-1]
                    heap.pop()
                    heapq.heapify(heap)
                    break
        self._count -= 1
        self._touch(job.queue, -1)
        return job

    def drain(self) -> list[Job]:
        """Every job still queued, taken out of the queue (by leaf name, then job order):
        for a caller to whom their order no longer matters."""
        out: list[Job] = []
        for leaf in sorted(self._heaps):
            heap = self._heaps[leaf]
            out.extend(entry[2] for entry in sorted(heap, key=lambda e: (e[0], e[1])))
            heap.clear()
        self._count = 0
        self._sub_count.clear()
        return out

    def with_steps(self) -> Iterator[tuple[Job, list[Pod]]]:
        """Pop jobs in order, each with its next gang step (jobs with none are passed over).
        Popping is lazy: stop iterating and the rest stay queued."""
        while (job := self.pop()) is not None:
            step = self.session.gang(job).next_step()
            if step:
                yield job, step

    def _best(self, name: str) -> Job | None:
        """The job the queue would hand out next (its own best, or its best child's)."""
        stamp = self._stamp(name)
        cached = self._best_cache.get(name)
        if cached is not None and cached[0] == stamp[0] and cached[1] == stamp[1]:
            # Nothing below this queue changed (no push or pop, no pod of its jobs
            # moved): the choice made last time stands.
            return cached[2]
        if name in self._choice or name in self._dirty:  # a parent queue
            child = self._choose(name)
            result = self._best(child) if child is not None else None
        else:
            result = self._top(name)
        self._best_cache[name] = (stamp[0], stamp[1], result)
        return result

    def _live(self, name: str) -> bool:
        """Whether the queue's subtree holds candidates."""
        return self._sub_count.get(name, 0) > 0

    def _choose(self, parent: str | None) -> str | None:
        """The child of ``parent`` that fair order serves first (None: none is live)."""
        heap = self._choice.setdefault(parent, [])
        dirty = self._dirty.pop(parent, None)
        if dirty:
            for child in sorted(dirty):
                self._key_again(heap, child)
        while heap:
            _key, child, stamp = heap[0]
            if self._live(child) and stamp == self._stamp(child):
                break
            heapq.heappop(heap)
            if self._live(child) and self._keyed.get(child) == stamp:
                self._key_again(heap, child)  # changed unannounced: keyed afresh
        else:
            return None
        # The keys hold floats: every child whose key is the top's but for shares too
        # close to tell is taken out and compared exactly (rare).
        top = heap[0][0]
        # The second smallest entry is a child of the top: when neither child is near the
        # top, no entry is (keys only grow down the heap, and so do their distances).
        size = len(heap)
        if (size < 2 or not _near(heap[1][0], top)) and (size < 3 or not _near(heap[2][0], top)):
            return heap[0][1]
        tied: list[tuple[tuple[Any, ...], str, tuple[int, int]]] = []
        while heap and _near(heap[0][0], top):
            entry = heapq.heappop(heap)
            if self._live(entry[1]) and entry[2] == self._stamp(entry[1]):
                tied.append(entry)
        for entry in tied:
            heapq.heappush(heap, entry)
        if len(tied) == 1:
            return tied[0][1]
        exact = {entry[1]: self._exact_key(entry[1], entry[0]) for entry in tied}
        first = min(exact.values())
        tied = [entry for entry in tied if exact[entry[1]] == first]
        if len(tied) == 1:
            return tied[0][1]
        shares = self.session.proportion

        def cmp(a: str, b: str) -> int:
            la, ra = shares.allocatable_share(a), shares.allocatable_share(b)
            if _pareto_less(la, ra):
                return -1
            if _pareto_less(ra, la):
                return 1
            qa, qb = self.state.queues[a], self.state.queues[b]
            if qa.created_at != qb.created_at:
                return -1 if qa.created_at < qb.created_at else 1
            return -1 if a < b else (1 if a > b else 0)

        # In name order first, as the queue tree lists children: the tie-break is not a
        # total order, so the sort must see them as it always did.
        names = sorted(entry[1] for entry in tied)
        return sorted(names, key=functools.cmp_to_key(cmp))[0]

    def _exact_key(self, name: str, key: tuple[Any, ...]) -> tuple[Any, ...]:
        """``key`` with its dominant shares exact, as :func:`compare_queues` reads them (the
        child's entry is up to date, so the state reads as it did when it was keyed)."""
        stamp = self._stamp(name)
        hit = self._exact_cache.get(name)
        if hit is not None and hit[0] == stamp:
            return hit[1]  # nothing below the queue moved since: the same figures
        job = self._best(name)
        assert job is not None
        _, req = self._job_info(job)
        alloc = self.state.queue_usage[name].allocated
        a = (alloc.gpu, alloc.cpu, alloc.mem)
        fig = self.fig
        zero, share = fig.alloc_zero[name], fig.alloc_exact[name]
        exact = (*key[:4], _exact_share(tuple(a[i] + req[i] for i in range(3)), zero, share),
                 _exact_share(a, zero, share))
        self._exact_cache[name] = (stamp, exact)
        return exact

    def _key_again(self, heap: list[Any], child: str) -> None:
        if not self._live(child):
            return
        stamp = self._stamp(child)
        if self._keyed.get(child) == stamp:
            return  # its newest entry is up to date
        job = self._best(child)
        if job is None:
            return
        self._keyed[child] = stamp
        heapq.heappush(heap, (self._queue_key(child, job), child, stamp))


def _figures(session: Session) -> OrderFigures:
    fig = session.order_figures
    if fig is None:
        fig = session.order_figures = OrderFigures(session)
    return fig
