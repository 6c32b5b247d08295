"""Consolidation: move preemptible pods to other nodes so a pending preemptible job fits.

A scenario is accepted only when every victim lands again (Pipelined on its new node);
nothing is evicted for good. At most ``maxConsolidationPreemptees`` victim jobs per
scenario (``-1``: no limit, ``0``: consolidation off). Off as well when GPU or CPU
placement is ``spread``, where packing would fight the strategy.
"""

from __future__ import annotations

from gpushare.model import Job, Pod
from gpushare.model.quantities import MILLI
from gpushare.scheduler.actions.common.candidates import LeafFilters, victim_lists
from gpushare.scheduler.actions.common.eviction import (
    in_preemption_delay,
    pending_candidates,
    run_action,
)
from gpushare.scheduler.actions.common.options import VictimOptions
from gpushare.scheduler.actions.common.outcome import Outcome
from gpushare.scheduler.actions.common.solver import Search, SearchRules
from gpushare.scheduler.placement_registry import placement_strategy
from gpushare.scheduler.session import Session

ACTION = "consolidation"


def _free_gpus(session: Session) -> int:
    """Idle plus releasing milli-GPUs on the ready nodes."""
    return sum(u.gpus_free_future_milli() for u in session.state.usage.values() if u.node.ready)


def _enough_gpus(session: Session, step: list[Pod], free: int) -> bool:
    """Idle plus releasing GPUs in the cluster (``free``) cover the step's GPUs."""
    need = 0
    big = session.max_gpu_memory or 0
    for pod in step:
        g = pod.gpu
        if g.whole:
            need += g.whole * MILLI
        elif g.is_shared:
            need += min(g.portion_on(big), MILLI) * g.devices
    return need == 0 or free >= need


def consolidation(session: Session) -> None:
    config = session.config
    limit = config.max_consolidation_preemptees
    if limit == 0 or not all(
            placement_strategy(gpu).allows_consolidation
            and placement_strategy(cpu).allows_consolidation
            for gpu, cpu in config.placements()):
        return
    options = VictimOptions.of(session.config)

    lists = victim_lists(session)

    def candidates(job: Job, partial: list[Pod]) -> LeafFilters:
        def qualifies(victim: Job) -> bool:
            return victim.key != job.key

        return {queue: qualifies for queue in lists.queues()}

    def validator(outcome: Outcome) -> bool:
        return not outcome.evicted

    search = Search(session, SearchRules(
        action=ACTION,
        reason="moved to make room for a pending job",
        candidates=candidates,
        validator=validator,
        max_victim_jobs=None if limit < 0 else limit,
        max_simulations=options.max_simulations,
    ))

    free: list[int] = []  # [commits seen, free milli-GPUs] (only commits change it)

    def may_try(job: Job, step: list[Pod]) -> bool:
        if not job.preemptible or in_preemption_delay(session, job):
            return False
        if not free or free[0] != search.commits:
            free[:] = [search.commits, _free_gpus(session)]
        return _enough_gpus(session, step, free[1])

    jobs = pending_candidates(session)
    if session.behaviour.skip_hopeless_jobs:
        # Free GPUs only shrink during the action (victims are moved, never evicted, and
        # the asking job takes room): a job whose step they do not cover now never gets
        # a search, so it is left out of the fair order from the start.
        now = _free_gpus(session)
        jobs = [
            j for j in jobs
            if j.preemptible and _enough_gpus(session, session.gang(j).next_step() or [], now)
        ]
    run_action(
        session,
        name=ACTION,
        jobs=jobs,
        search=search,
        may_try=may_try,
        per_queue_signatures=False,
    )
