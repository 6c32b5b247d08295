"""Reclaim: a queue below its fair share takes resources back from other queues.

* Reclaimers are pending jobs, in fair order, outside their preemption delay, whose next
  step keeps their leaf queue within its fair share (and within quota, for a
  non-preemptible job).
* Victims are preemptible jobs of other queues with pods on nodes, past their reclaim
  min-runtime (an elastic job inside it may lose only its surplus pods), in queues that
  some reclaim strategy allows to lose resources.
* A found scenario must keep to the reclaim rules (:mod:`.reclaim_rules`): every victim
  is taken from a queue above its allocatable share, or (reclaimer within its quota)
  above its quota; and the reclaimer overtakes no sibling it takes from. Victims that
  land again elsewhere do not count as reclaimed (``allowConsolidatingReclaim``); outside
  ``compat: kai`` the pods disrupted (evicted or moved) are bounded relative to the
  request (``maxDisruptionRatio``).
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

from gpushare.model import ACTIVE_ALLOCATED, Job, Pod
from gpushare.model.quantities import MILLI, RESOURCES, Res, res_natural
from gpushare.scheduler.actions.common.candidates import LazyFilters, LeafFilters, victim_lists
from gpushare.scheduler.actions.common.eviction import (
    elastic_memo,
    elastic_victims_keep_gang,
    in_preemption_delay,
    pending_candidates,
    run_action,
    running_seconds,
)
from gpushare.scheduler.actions.common.options import VictimOptions
from gpushare.scheduler.actions.common.solver import Outcome, Search, victim_units
from gpushare.scheduler.actions.common.steps import VictimSteps
from gpushare.scheduler.actions.common.victim_queue import pod_quantities
from gpushare.scheduler.plugins import minruntime
from gpushare.scheduler.plugins.proportion import steady as steady_rules
from gpushare.scheduler.plugins.proportion.reclaimable import (
    Reclaimer,
    can_reclaim,
    reclaimable,
    victim_queue_allowed,
    within_quota_if_non_preemptible,
)
from gpushare.scheduler.plugins.proportion.resource_share import Quantities, Shares, path_to
from gpushare.scheduler.plugins.proportion.steady import SteadyShares
from gpushare.scheduler.session import Session

ACTION = "reclaim"


def _request(session: Session, pods: list[Pod]) -> Quantities:
    vec = session.step_request(pods, session.min_gpu_memory)
    return dict(zip(RESOURCES, vec, strict=True))


def reclaimer_of(session: Session, job: Job, pods: list[Pod]) -> Reclaimer:
    return Reclaimer(job.queue, job.preemptible, _request(session, pods))


def _protected(session: Session, reclaimer: Job, victim: Job) -> bool:
    limit = minruntime.reclaim_min_runtime(session.state.queues, reclaimer.queue, victim.queue)
    return minruntime.is_protected(running_seconds(session, victim), limit)


def reclaim(session: Session) -> None:
    options = VictimOptions.of(session.config)
    elastic = elastic_memo(session)
    kai = session.config.kai

    limits: dict[tuple[str, str], float] = {}  # (reclaimer queue, victim queue) -> minimum
    ran: dict[str, tuple[int, float]] = {}  # victim job -> (pod-set version, seconds run)

    def protected(job: Job, victim: Job) -> bool:
        pair = (job.queue, victim.queue)
        limit = limits.get(pair)
        if limit is None:
            limit = limits[pair] = minruntime.reclaim_min_runtime(
                session.state.queues, job.queue, victim.queue
            )
        if limit <= 0:
            return False
        version = session.state.job_version.get(victim.key, 0)
        known = ran.get(victim.key)
        if known is None or known[0] != version:
            known = ran[victim.key] = (version, running_seconds(session, victim))
        return minruntime.is_protected(known[1], limit)

    # The second path for queues below their weighted share (see .steady); off under KAI.
    steady = SteadyShares.of(session) if options.steady_fair_share_reclaim else None

    def paths(shares: Shares, job: Job, reclaimer: Reclaimer) -> tuple[bool, bool]:
        """Whether the fair-share rules and the steady path may be used at all."""
        fair = can_reclaim(shares, reclaimer)
        on_steady = (
            steady is not None
            and steady_rules.may_reclaim(steady, shares, job.queue, reclaimer.request)
            and within_quota_if_non_preemptible(shares, reclaimer)
        )
        return fair, on_steady

    lists = victim_lists(session)
    # Per victim job, at its pod-set version: the GPUs of the first step it would give up
    # (read by the steady path).
    first_gpus: dict[str, tuple[int, Fraction]] = {}

    def first_step_gpus(victim: Job) -> Fraction:
        version = session.state.job_version.get(victim.key, 0)
        known = first_gpus.get(victim.key)
        if known is None or known[0] != version:
            known = first_gpus[victim.key] = (version, _first_step_gpus(session, victim))
        return known[1]

    def candidates(job: Job, partial: list[Pod]) -> LeafFilters:
        shares = search.snapshot
        reclaimer = reclaimer_of(session, job, partial)
        fair, on_steady = paths(shares, job, reclaimer)
        verdicts: dict[tuple[Any, ...], bool] = {}
        gpu_only = not search.reads(job, partial)[1]  # jobs holding no GPU are not read
        # The queue-level rules read the victim's branch where it meets the reclaimer's:
        # decided once per branch.
        mine = {q.name for q in path_to(shares, job.queue)}
        branches: dict[str, tuple[bool, Fraction]] = {}

        def branch_rules(theirs: str, queue_name: str) -> tuple[bool, Fraction]:
            branch = branches.get(theirs)
            if branch is None:
                allowed = fair and victim_queue_allowed(shares, reclaimer, queue_name)
                surplus = Fraction(0)
                if not allowed and on_steady and steady is not None:
                    surplus = steady_rules.branch_surplus(steady, shares, job.queue, queue_name)
                branch = branches[theirs] = (allowed, surplus)
            return branch

        closed_branches: dict[str, bool] = {}

        def closed(queue_name: str) -> bool:
            """A whole branch (a child of a queue on the reclaimer's path) no rule may
            take from, or (outside compat: kai) none of whose queues has a smallest step
            the rules allow on its own."""
            if queue_name not in shares or queue_name in mine:
                return False
            parent = shares[queue_name].parent
            if parent is not None and parent in shares and parent not in mine:
                return False  # not where the branches meet
            found = closed_branches.get(queue_name)
            if found is None:
                allowed, surplus = branch_rules(queue_name, queue_name)
                found = not allowed and surplus <= 0
                if not found and not kai:
                    found = not any(
                        _some_step_admissible(
                            job, reclaimer, leaf, queue_name, verdicts, gpu_only
                        )
                        for leaf in _leaves_under(lists.tree(), queue_name)
                    )
                closed_branches[queue_name] = found
            return found

        def decide(queue_name: str) -> Callable[[Job], bool] | None:
            if queue_name == job.queue or queue_name not in shares:
                return None
            theirs = group(queue_name)  # the branch the rules read for this queue
            allowed, surplus = branch_rules(theirs, queue_name)
            if not allowed and surplus <= 0:
                return None
            if not kai and not _some_step_admissible(
                job, reclaimer, queue_name, theirs, verdicts, gpu_only
            ):
                return None
            if allowed:
                return lambda victim: _not_protected(job, victim)
            return lambda victim: (
                first_step_gpus(victim) <= surplus and _not_protected(job, victim)
            )

        groups: dict[str, str] = {}

        def group(queue_name: str) -> str:
            """For one victim step alone the rules read only the victim's branch where it
            meets the reclaimer's: a step refused from one queue of a branch is refused
            from every queue of it."""
            found = groups.get(queue_name)
            if found is None:
                found = groups[queue_name] = (
                    _branch_of(shares, mine, queue_name) if queue_name in shares else queue_name
                )
            return found

        return LazyFilters(list(lists.queues()), decide, closed, group)

    def _not_protected(job: Job, victim: Job) -> bool:
        return elastic(victim) or not protected(job, victim)

    def steady_first(job: Job) -> bool:
        """A reclaimer below what it may keep gets what it frees before the victims' jobs
        (otherwise they would take it straight back)."""
        shares = search.snapshot
        step = session.gang(job).next_step() or []
        return paths(shares, job, reclaimer_of(session, job, step))[1]

    def protected_core(job: Job, victim: Job) -> bool:
        return elastic(victim) and protected(job, victim)

    def validator(outcome: Outcome) -> bool:
        shares = search.snapshot
        job = outcome.preemptor
        reclaimer = reclaimer_of(session, job, outcome.placed)
        units = victim_units(
            outcome, session.state.jobs, count_moved=not session.config.allow_consolidating_reclaim
        )
        fair, on_steady = paths(shares, job, reclaimer)
        accepted = fair and reclaimable(shares, reclaimer, units, options.saturation_multiplier)
        if not accepted and on_steady and steady is not None:
            accepted = steady_rules.reclaimable(
                steady, shares, job.queue, reclaimer.request, units,
                options.saturation_multiplier,
            )
        if not accepted:
            return False
        if kai and not _elastic_min_runtime_ok(session, job, outcome):
            return False
        return options.max_disruption_ratio <= 0 or _disruption_ok(
            outcome, reclaimer, options.max_disruption_ratio
        )

    def unit_admissible(job: Job, reclaimer: Reclaimer, victim_queue: str,
                        unit: Quantities) -> bool:
        """The rules' verdict on taking one victim unit alone from ``victim_queue``."""
        shares = search.snapshot
        units = {victim_queue: [unit]}
        fair, on_steady = paths(shares, job, reclaimer)
        if fair and reclaimable(shares, reclaimer, units, options.saturation_multiplier):
            return True
        return bool(on_steady and steady is not None and steady_rules.reclaimable(
            steady, shares, job.queue, reclaimer.request, units, options.saturation_multiplier
        ))

    def _some_step_admissible(
        job: Job, reclaimer: Reclaimer, victim_queue: str, theirs: str,
        verdicts: dict[tuple[Any, ...], bool], gpu_only: bool,
    ) -> bool:
        """Whether the queue's smallest conceivable victim step (the least GPU, CPU and
        memory of any of its pods) may be taken alone: the verdict only gets worse for a
        larger step, so a refusal rules the whole queue out. For one unit the rules read
        only the victim's branch where it meets the reclaimer's, so queues of one branch
        with the same least step share the verdict."""
        leaf = lists.leaf(victim_queue)
        least = None if leaf is None else leaf.least_gpu if gpu_only else leaf.least
        if least is None:
            return False
        return _verdict(job, reclaimer, victim_queue, theirs, least, verdicts)

    def _verdict(
        job: Job, reclaimer: Reclaimer, victim_queue: str, theirs: str,
        least: tuple[int, int, int], verdicts: dict[tuple[Any, ...], bool],
    ) -> bool:
        """The rules' verdict on a step of ``least`` alone from ``victim_queue`` (of the
        branch ``theirs``), shared by the queues of the branch."""
        key = (theirs, least)
        verdict = verdicts.get(key)
        if verdict is None:
            unit = res_natural(Res(*least))
            verdict = verdicts[key] = unit_admissible(job, reclaimer, victim_queue, unit)
        return verdict

    def admissible(job: Job, partial: list[Pod], victim: Job, pods: list[Pod]) -> bool:
        """The rules' verdict on taking this one victim step alone (as a core unit)."""
        unit: Quantities = {r: Fraction(0) for r in RESOURCES}
        for pod in pods:
            for r, q in pod_quantities(pod).items():
                unit[r] += q
        return unit_admissible(job, reclaimer_of(session, job, partial), victim.queue, unit)

    search = Search(
        session=session,
        action=ACTION,
        reason="reclaimed for a queue below its fair share",
        candidates=candidates,
        validator=validator,
        protected_core=None if kai else protected_core,
        max_simulations=options.max_simulations,
        stay_before_asking=not kai,
        preemptor_first=None if steady is None else steady_first,
        admissible=admissible,
    )

    def may_try(job: Job, step: list[Pod]) -> bool:
        if in_preemption_delay(session, job):
            return False
        return any(paths(search.current_shares(), job, reclaimer_of(session, job, step)))

    run_action(
        session, name=ACTION, jobs=pending_candidates(session), search=search, may_try=may_try
    )


def _leaves_under(tree: dict[str | None, list[str]], queue: str) -> list[str]:
    """The leaf queues at or under ``queue`` in the victim lists' tree."""
    children = tree.get(queue)
    if children is None:
        return [queue]
    out: list[str] = []
    for child in children:
        out.extend(_leaves_under(tree, child))
    return out


def _branch_of(shares: Shares, mine: set[str], victim_queue: str) -> str:
    """The victim's branch where it meets the reclaimer's (``mine``: the reclaimer's queue
    and its ancestors): the victim-side queue that :func:`leveled` pairs."""
    current = victim_queue
    while True:
        parent = shares[current].parent
        if parent is None or parent not in shares or parent in mine:
            return current
        current = parent


def _first_step_gpus(session: Session, victim: Job) -> Fraction:
    """GPUs of the first pods the victim would give up."""
    steps = VictimSteps(
        victim, session.state.job_pods(victim), lambda p: p.status in ACTIVE_ALLOCATED
    )
    return sum((Fraction(p.held().gpu, MILLI) for p in steps.next_step()), Fraction(0))


def _elastic_min_runtime_ok(session: Session, job: Job, outcome: Outcome) -> bool:
    """An elastic victim inside its min-runtime may only lose pods above its gang size."""
    return elastic_victims_keep_gang(
        session, outcome, lambda victim: _protected(session, job, victim)
    )


def _disruption_ok(outcome: Outcome, reclaimer: Reclaimer, ratio: Fraction) -> bool:
    """Consolidating reclaim (victims moved, not only evicted) may disrupt at most
    ``ratio`` times what the reclaimer asks for: GPUs for a reclaimer that asks for GPUs,
    otherwise each resource it asks for.

    A reclaim that only evicts is bounded by the fair-share rules already; moving pods
    is what lets an over-served queue restart many times what it needs. The bound reads
    the scarce resource only: GPU pods differ widely in the CPU and memory that come with
    a GPU, and that must not decide whether a GPU reclaim may go ahead.
    """
    if not outcome.moved:
        return True
    asked_gpu = reclaimer.request.get("gpu", Fraction(0))
    bounded = ["gpu"] if asked_gpu > 0 else [
        r for r in RESOURCES if reclaimer.request.get(r, Fraction(0)) > 0
    ]
    for r in bounded:
        disrupted = sum(
            (outcome.victim_quantities[pod.key].get(r, Fraction(0))
             for pod in outcome.victim_order),
            Fraction(0),
        )
        if disrupted > ratio * reclaimer.request.get(r, Fraction(0)):
            return False
    return True
