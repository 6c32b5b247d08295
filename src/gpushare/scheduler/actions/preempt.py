"""Preempt: inside one queue, a pending job evicts jobs of strictly lower priority.

* Preemptors are pending jobs in fair order, outside their preemption delay; a
  non-preemptible one must stay within its queues' quota.
* Victims are preemptible jobs of the same queue with a strictly lower priority and pods
  on nodes, past their preempt min-runtime (an elastic job inside it may lose only its
  surplus pods).
"""

from __future__ import annotations

from gpushare.model import Job, Pod
from gpushare.scheduler.actions.common.candidates import LeafFilters, victim_lists
from gpushare.scheduler.actions.common.eviction import (
    elastic_memo,
    elastic_victims_keep_gang,
    in_preemption_delay,
    pending_candidates,
    run_action,
    running_seconds,
)
from gpushare.scheduler.actions.common.options import VictimOptions
from gpushare.scheduler.actions.common.outcome import Outcome
from gpushare.scheduler.actions.common.solver import Search, SearchRules
from gpushare.scheduler.plugins import minruntime
from gpushare.scheduler.session import Session

ACTION = "preempt"


def _protected(session: Session, victim: Job) -> bool:
    limit = minruntime.preempt_min_runtime(session.state.queues, victim.queue)
    return minruntime.is_protected(running_seconds(session, victim), limit)


def preempt(session: Session) -> None:
    options = VictimOptions.of(session.config)
    elastic = elastic_memo(session)
    behaviour = session.behaviour

    def candidates(job: Job, partial: list[Pod]) -> LeafFilters:
        def qualifies(victim: Job) -> bool:
            if victim.key == job.key or victim.priority >= job.priority:
                return False
            return elastic(victim) or not _protected(session, victim)

        return {job.queue: qualifies}

    def validator(outcome: Outcome) -> bool:
        if not behaviour.min_runtime_in_search:
            return elastic_victims_keep_gang(
                session, outcome, lambda victim: _protected(session, victim)
            )
        return True

    search = Search(session, SearchRules(
        action=ACTION,
        reason="preempted by a higher-priority job of its queue",
        candidates=candidates,
        validator=validator,
        protected_core=(
            (lambda job, victim: elastic(victim) and _protected(session, victim))
            if behaviour.min_runtime_in_search else None
        ),
        max_simulations=options.max_simulations,
        stay_before_asking=True,
    ))

    def may_try(job: Job, step: list[Pod]) -> bool:
        if in_preemption_delay(session, job):
            return False
        return session.proportion.non_preemptible_within_quota(job, step)

    jobs = pending_candidates(session)
    if behaviour.skip_hopeless_jobs:
        jobs = _queues_with_victims(session, jobs)
    run_action(session, name=ACTION, jobs=jobs, search=search, may_try=may_try)


def _queues_with_victims(session: Session, jobs: list[Job]) -> list[Job]:
    """The jobs of the queues where some pending job outranks a preemptible job of its
    queue: elsewhere no job has a victim to search for, and leaving those queues out of
    the fair order saves popping (and pre-checking) every pending job of the cluster."""
    lists = victim_lists(session)
    best: dict[str, int] = {}
    for job in jobs:
        best[job.queue] = max(best.get(job.queue, job.priority), job.priority)
    keep = set()
    for queue, priority in best.items():
        lowest = lists.lowest_priority(queue)
        if lowest is not None and lowest < priority:
            keep.add(queue)
    return [j for j in jobs if j.queue in keep]
