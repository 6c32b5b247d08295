"""Orders: queues (hierarchical, fair-share aware), jobs inside a queue, tasks in a job.

:class:`JobQueue` hands out jobs the way KAI's allocate and eviction actions consume them:
walk the queue tree from the roots, at each level take the best child (compared using the
best job of each), down to a leaf, then pop that leaf's best job. Because allocations
change the figures, the order is re-evaluated at every pop.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from fractions import Fraction

from gpushare.model.job import Job
from gpushare.scheduler.gang import GangView
from gpushare.scheduler.session import F0, Session, Vec, vadd

JobKey = tuple[int, int, float, str]


def job_order_key(session: Session, job: Job, gang: GangView | None = None) -> JobKey:
    """Higher priority first; below its gang minimum, then at it, then above; older; name."""
    gang = gang or session.gang(job)
    return (-job.priority, gang.elastic_state(), job.created_at, job.key)


def job_init_request(session: Session, job: Job) -> Vec:
    """What the job's next step asks for (memory-sized GPU requests at the smallest GPU)."""
    step = session.gang(job).next_step() or []
    return session.step_request(step, session.min_gpu_memory)


def compare_queues(
    session: Session, left: str, right: str, left_job: Job | None, right_job: Job | None,
    left_victims: Vec | None = None, right_victims: Vec | None = None,
) -> int:
    """Negative when ``left`` goes first (KAI's queue order, criterion by criterion)."""
    l_over, r_over = session.over_fair_share(left), session.over_fair_share(right)
    if l_over != r_over:
        return 1 if l_over else -1
    l_req = job_init_request(session, left_job) if left_job else (F0, F0, F0)
    r_req = job_init_request(session, right_job) if right_job else (F0, F0, F0)
    l_starved = session.within_deserved(left, l_req)
    r_starved = session.within_deserved(right, r_req)
    if l_starved != r_starved:
        return -1 if l_starved else 1
    lq, rq = session.state.queues[left], session.state.queues[right]
    if lq.priority != rq.priority:
        return -1 if lq.priority > rq.priority else 1
    l_with, r_with = vadd(session.allocated(left), l_req), vadd(session.allocated(right), r_req)
    l_zero, r_zero = _zero_share_violation(session, left, l_with), _zero_share_violation(
        session, right, r_with
    )
    if l_zero != r_zero:
        return 1 if l_zero else -1
    if left_victims is not None:
        l_with = tuple(a - b for a, b in zip(l_with, left_victims, strict=True))  # type: ignore[assignment]
    if right_victims is not None:
        r_with = tuple(a - b for a, b in zip(r_with, right_victims, strict=True))  # type: ignore[assignment]
    c = _cmp(session.drf_share(left, l_with), session.drf_share(right, r_with))
    if c:
        return c
    c = _cmp(
        session.drf_share(left, session.allocated(left)),
        session.drf_share(right, session.allocated(right)),
    )
    if c:
        return c
    la, ra = session.allocatable_share(left), session.allocatable_share(right)
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
    share = session.allocatable_share(name)
    return any(share[i] == 0 and allocated_with_job[i] > 0 for i in range(3))


def _pareto_less(a: Vec, b: Vec) -> bool:
    """``a`` no larger than ``b`` everywhere (-1 is unlimited) and smaller somewhere."""

    def le(x: Fraction, y: Fraction) -> bool:
        if x == -1:
            return y == -1
        return y == -1 or x <= y

    return all(le(a[i], b[i]) for i in range(3)) and not all(le(b[i], a[i]) for i in range(3))


class JobQueue:
    """Jobs waiting for an action, handed out in fair order (see module doc).

    ``jobs`` are the candidates; ``push`` puts a job back (it competes again);
    ``pop`` returns the next job or None.
    """

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
        return pick(jobs, key=self._job_key)  # type: ignore[type-var]

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
