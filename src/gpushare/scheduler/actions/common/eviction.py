"""What the eviction actions share: options, eligibility of preemptors and victims, and
the loop that hands pending jobs to the solver."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpushare.model import ACTIVE_ALLOCATED, Job, Pod
from gpushare.scheduler.actions.allocate import eligible_jobs
from gpushare.scheduler.actions.common.candidates import victim_lists
from gpushare.scheduler.actions.common.options import VictimOptions
from gpushare.scheduler.actions.common.outcome import Outcome
from gpushare.scheduler.actions.common.signatures import FailedJobs
from gpushare.scheduler.actions.common.solver import Search
from gpushare.scheduler.actions.common.steps import VictimSteps
from gpushare.scheduler.ordering import JobQueue
from gpushare.scheduler.session import Session


def active_pods(session: Session, job: Job) -> list[Pod]:
    return [p for p in session.state.job_pods(job) if p.status in ACTIVE_ALLOCATED]


def in_preemption_delay(session: Session, job: Job) -> bool:
    """A job may not trigger evictions until ``delay`` after it was created (or last
    evicted)."""
    if job.preemption_delay <= 0:
        return False
    since = job.created_at
    if job.last_eviction_at is not None:
        since = max(since, job.last_eviction_at)
    return session.now - since < job.preemption_delay


def running_seconds(session: Session, job: Job) -> float:
    """How long the job has run since its most recent pod start."""
    starts = [p.started_at for p in active_pods(session, job)]
    if not starts:
        return float("inf")
    return session.now - max(starts)


def is_elastic(session: Session, job: Job) -> bool:
    return len(job.pods) > session.gang(job).min_total()


def elastic_memo(session: Session) -> Callable[[Job], bool]:
    """``is_elastic`` remembered per job for one action (a job's shape does not change)."""
    seen: dict[str, bool] = {}

    def elastic(job: Job) -> bool:
        value = seen.get(job.key)
        if value is None:
            value = seen[job.key] = is_elastic(session, job)
        return value

    return elastic


def step_shape(session: Session, job: Job, step: list[Pod]) -> tuple[Any, ...]:
    """What makes two jobs' steps comparable for scheduling signatures."""
    selectors = tuple(sorted({p.constraints() for p in step}))
    return (job.priority, job.preemptible, selectors)


def run_action(
    session: Session,
    *,
    name: str,
    jobs: list[Job],
    search: Search,
    may_try: Callable[[Job, list[Pod]], bool],
    per_queue_signatures: bool = True,
    after_success: Callable[[Outcome], None] | None = None,
) -> int:
    """Pop pending jobs in fair order and let the search find victims for each one's next
    gang step, until the action's search budget is spent. Returns the number of jobs that
    succeeded."""
    options = VictimOptions.of(session.config)
    state = session.state
    budget = options.search_budget
    search.budget.start(budget)
    had_turn, orders = _orders_by_turn(session, name, jobs, budget)
    searched: set[str] = set()
    failed: dict[str, FailedJobs] = {}
    done = 0
    for order in orders:
        if search.budget.spent:
            break
        for job, step in order.with_steps():
            if not may_try(job, step):
                continue
            bucket = failed.setdefault(job.queue if per_queue_signatures else "", FailedJobs())
            shape = step_shape(session, job, step)
            if options.use_signatures and bucket.not_easier(shape, step):
                continue
            if search.budget.out_of_budget():
                search.budget.spent = True
                break
            searched.add(job.key)
            stmt = state.statement()
            outcome = search.solve(stmt, job, step)
            if outcome is None:
                stmt.discard()
                if search.budget.spent:
                    note = (f"{name} not decided this cycle: its victim search budget "
                            f"({budget} units of work) ran out")
                    before = session.pending_reasons.get(job.key)
                    session.set_reason(job, f"{before}; {note}" if before else note)
                    break
                bucket.add(shape, step)
                continue
            stmt.commit()
            search.note_commit()
            victim_lists(session).note_placed(
                sorted({p.node for p in [*outcome.placed, *outcome.moved] if p.node is not None})
            )
            done += 1
            session.clear_reason(job)
            if after_success is not None:
                after_success(outcome)
    if search.budget.spent:
        # Only this cycle's candidates are remembered (deleted jobs drop out).
        state.search_turns[name] = (had_turn | searched) & {j.key for j in jobs}
    else:
        state.search_turns.pop(name, None)  # everyone got a search: turns start afresh
    session.searches[name] = {
        "jobs": len(searched), "work": search.budget.work[0],
        "steps": search.budget.stats.steps, "simulations": search.budget.stats.simulations,
        "succeeded": done, "budget_ran_out": int(search.budget.spent),
    }
    return done


def _orders_by_turn(
    session: Session, name: str, jobs: list[Job], budget: int
) -> tuple[set[str], list[JobQueue]]:
    """The jobs in the order the action takes them: after a cycle in which its budget ran
    out, the jobs it searched for since go after the others (each part in fair order),
    until every waiting job has had its turn. Returns the jobs that had theirs, and the
    orders to take in turn."""
    had_turn = session.state.search_turns.get(name, set()) if budget else set()
    waiting = [j for j in jobs if j.key not in had_turn]
    if not waiting:
        return set(), [JobQueue(session, jobs)]
    orders = [JobQueue(session, waiting)]
    if len(waiting) < len(jobs):
        orders.append(JobQueue(session, [j for j in jobs if j.key in had_turn]))
    return had_turn, orders


def elastic_victims_keep_gang(
    session: Session, outcome: Outcome, protected: Callable[[Job], bool]
) -> bool:
    """Min-runtime on elastic victims: a protected one must keep its gang (lose only its
    surplus pods)."""
    for victim_key, pods in outcome.victim_jobs().items():
        victim = session.state.jobs[victim_key]
        if not is_elastic(session, victim) or not protected(victim):
            continue
        taken = {p.key for p in pods}

        def still_active(p: Pod, taken: set[str] = taken) -> bool:
            return p.status in ACTIVE_ALLOCATED and p.key not in taken

        steps = VictimSteps(victim, session.state.job_pods(victim), still_active)
        if not steps.satisfied():
            return False
    return True


def pending_candidates(session: Session) -> list[Job]:
    """Jobs with a formable next step, in existing leaf queues."""
    return eligible_jobs(session)
