"""Reclaim: a queue below its fair share takes resources back from other queues.

* Reclaimers are pending jobs, in fair order, outside their preemption delay, whose next
  step keeps their leaf queue within its fair share (and within quota, for a
  non-preemptible job).
* Victims are preemptible jobs of other queues with pods on nodes, past their reclaim
  min-runtime (an elastic job inside it may lose only its surplus pods), in queues that
  some reclaim strategy allows to lose resources.
* A found scenario must keep to the reclaim rules: every victim is taken from a queue
  above its allocatable share, or (reclaimer within its quota) above its quota; and the
  reclaimer overtakes no sibling it takes from. Victims that land again elsewhere do not
  count as reclaimed (``allowConsolidatingReclaim``); outside ``compat: kai`` the pods
  disrupted (evicted or moved) are bounded relative to the request
  (``maxDisruptionRatio``).

The rules themselves are the proportion plugin's (``session.proportion.reclaim_rules``,
:mod:`~gpushare.scheduler.plugins.proportion.reclaim_rules`): this action orchestrates
(reclaimers in fair order, victims per branch, the search) and asks them.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

from gpushare.model import ACTIVE_ALLOCATED, Job, Pod
from gpushare.model.quantities import MILLI, RESOURCES, Quantities, Res, as_quantities, res_natural
from gpushare.scheduler.actions.common.candidates import LazyFilters, LeafFilters, victim_lists
from gpushare.scheduler.actions.common.eviction import (
    elastic_memo,
    elastic_victims_keep_gang,
    evicts_for,
    pending_candidates,
    run_action,
    running_seconds,
)
from gpushare.scheduler.actions.common.options import VictimOptions
from gpushare.scheduler.actions.common.outcome import Outcome, victim_units
from gpushare.scheduler.actions.common.solver import Search, SearchRules
from gpushare.scheduler.actions.common.steps import VictimSteps
from gpushare.scheduler.actions.common.victim_queue import pod_quantities
from gpushare.scheduler.plugins import minruntime
from gpushare.scheduler.plugins.proportion.gpu_type_reclaim import (
    branch_over,
    reclaim_allowed,
    reclaim_by_type,
    reclaim_kinds,
    victim_allowed,
)
from gpushare.scheduler.plugins.proportion.reclaim_rules import disruption_within
from gpushare.scheduler.plugins.proportion.reclaimable import Reclaimer
from gpushare.scheduler.plugins.proportion.resource_share import Shares, path_to
from gpushare.scheduler.session import Session

ACTION = "reclaim"


def _request(session: Session, pods: list[Pod]) -> Quantities:
    vec = session.step_request(pods, session.min_gpu_memory)
    return as_quantities(vec)


def reclaimer_of(session: Session, job: Job, pods: list[Pod]) -> Reclaimer:
    return Reclaimer(job.queue, job.preemptible, _request(session, pods))


def _protected(session: Session, reclaimer: Job, victim: Job) -> bool:
    limit = minruntime.reclaim_min_runtime(session.state.queues, reclaimer.queue, victim.queue)
    return minruntime.is_protected(running_seconds(session, victim), limit)


def reclaim(session: Session) -> None:
    _Reclaim(session).run()


class _MinRuntimes:
    """The reclaim min-runtime between two queues and each victim's time run, remembered
    for the action (a victim's time is read again when its pods change)."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._limits: dict[tuple[str, str], float] = {}  # (reclaimer queue, victim queue)
        self._ran: dict[str, tuple[int, float]] = {}  # victim job -> (pod-set version, s)

    def protected(self, job: Job, victim: Job) -> bool:
        session = self._session
        pair = (job.queue, victim.queue)
        limit = self._limits.get(pair)
        if limit is None:
            limit = self._limits[pair] = minruntime.reclaim_min_runtime(
                session.state.queues, job.queue, victim.queue
            )
        if limit <= 0:
            return False
        version = session.state.job_version.get(victim.key, 0)
        known = self._ran.get(victim.key)
        if known is None or known[0] != version:
            known = self._ran[victim.key] = (version, running_seconds(session, victim))
        return minruntime.is_protected(known[1], limit)


class _Reclaim:
    """One run of the action: its rules, read by the shared search."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.behaviour = session.behaviour
        self.options = VictimOptions.of(session.config)
        self.elastic = elastic_memo(session)
        self.min_runtimes = _MinRuntimes(session)
        # The proportion plugin's reclaim rules; their second path, for queues below
        # their weighted share (steady), is off under KAI.
        self.rules = session.proportion.reclaim_rules(
            self.options.steady_fair_share_reclaim, self.options.saturation_multiplier
        )
        self.lists = victim_lists(session)
        # Per victim job, at its pod-set version: the GPUs of the first step it would
        # give up (read by the steady path).
        self._first_gpus: dict[str, tuple[int, Fraction]] = {}
        in_search = self.behaviour.min_runtime_in_search
        self.search = Search(session, SearchRules(
            action=ACTION,
            reason="reclaimed for a queue below its fair share",
            candidates=self.candidates,
            validator=self.validator,
            protected_core=self.protected_core if in_search else None,
            max_simulations=self.options.max_simulations,
            stay_before_asking=True,
            preemptor_first=None if self.rules.steady is None else self.steady_first,
            admissible=self.admissible,
        ))

    def run(self) -> None:
        session = self.session
        run_action(session, name=ACTION, jobs=pending_candidates(session),
                   search=self.search, may_try=self.may_try)

    # ------------------------------------------------------------------ rules
    def may_try(self, job: Job, step: list[Pod]) -> bool:
        if not evicts_for(self.session, job):
            return False
        shares = self.search.current_shares()
        return (self.rules.may_reclaim(shares, reclaimer_of(self.session, job, step))
                or bool(self.type_kinds(job, step)))

    def type_kinds(self, job: Job, step: list[Pod]) -> frozenset[str]:
        """The named GPU types on which the per-type path lets the job's step reclaim
        (empty: none, or no queue has a type entry)."""
        types = self.session.proportion.gpu_types
        if types is None:
            return frozenset()
        return reclaim_kinds(types, job, step, self.session.min_gpu_memory)

    def candidates(self, job: Job, partial: list[Pod]) -> LeafFilters:
        return _StepFilters(self, job, partial).filters()

    def not_protected(self, job: Job, victim: Job) -> bool:
        return self.elastic(victim) or not self.min_runtimes.protected(job, victim)

    def protected_core(self, job: Job, victim: Job) -> bool:
        return self.elastic(victim) and self.min_runtimes.protected(job, victim)

    def first_step_gpus(self, victim: Job) -> Fraction:
        version = self.session.state.job_version.get(victim.key, 0)
        known = self._first_gpus.get(victim.key)
        if known is None or known[0] != version:
            known = self._first_gpus[victim.key] = (
                version, _first_step_gpus(self.session, victim)
            )
        return known[1]

    def steady_first(self, job: Job) -> bool:
        """A reclaimer below what it may keep gets what it frees before the victims' jobs
        (otherwise they would take it straight back)."""
        step = self.session.gang(job).next_step() or []
        shares = self.search.figures.snapshot
        return self.rules.served_first(shares, reclaimer_of(self.session, job, step))

    def validator(self, outcome: Outcome) -> bool:
        session, options = self.session, self.options
        shares = self.search.figures.snapshot
        job = outcome.preemptor
        reclaimer = reclaimer_of(session, job, outcome.placed)
        units = victim_units(
            outcome, session.state.jobs, count_moved=not session.config.allow_consolidating_reclaim
        )
        types = session.proportion.gpu_types
        if not self.rules.allows(shares, reclaimer, units):
            if types is None or not reclaim_by_type(types, job.queue, outcome.placed,
                                                    outcome.evicted):
                return False
        elif types is not None and not reclaim_allowed(types, job.queue, outcome.placed,
                                                       outcome.evicted):
            return False
        if not self.behaviour.min_runtime_in_search and not _elastic_min_runtime_ok(
            session, job, outcome
        ):
            return False
        return options.max_disruption_ratio <= 0 or _disruption_ok(
            outcome, reclaimer, options.max_disruption_ratio
        )

    def unit_admissible(self, reclaimer: Reclaimer, victim_queue: str,
                        unit: Quantities) -> bool:
        """The rules' verdict on taking one victim unit alone from ``victim_queue``."""
        shares = self.search.figures.snapshot
        return self.rules.allows(shares, reclaimer, {victim_queue: [unit]})

    def admissible(self, job: Job, partial: list[Pod], victim: Job, pods: list[Pod]) -> bool:
        """The rules' verdict on taking this one victim step alone (as a core unit)."""
        unit: Quantities = {r: Fraction(0) for r in RESOURCES}
        for pod in pods:
            for r, q in pod_quantities(pod).items():
                unit[r] += q
        reclaimer = reclaimer_of(self.session, job, partial)
        if self.unit_admissible(reclaimer, victim.queue, unit):
            return True
        types = self.session.proportion.gpu_types
        kinds = self.type_kinds(job, partial)
        return types is not None and bool(kinds) and branch_over(types, job.queue,
                                                                  victim.queue, kinds)


class _StepFilters:
    """Per leaf queue, which victims one reclaimer's step may take (decided lazily, queue
    by queue). The queue-level rules read the victim's branch where it meets the
    reclaimer's, so they are decided once per branch."""

    def __init__(self, action: _Reclaim, job: Job, partial: list[Pod]) -> None:
        self.action = action
        self.job = job
        self.shares = action.search.figures.snapshot
        self.reclaimer = reclaimer_of(action.session, job, partial)
        self.paths = action.rules.paths(self.shares, self.reclaimer)
        #: The named GPU types the per-type path lets this step reclaim on.
        self.kinds = action.type_kinds(job, partial)
        # Jobs holding no GPU are not read: the least step to judge is the least GPU one.
        self.gpu_only = not action.search.reads(job, partial)[1]
        self.mine = {q.name for q in path_to(self.shares, job.queue)}
        self._verdicts: dict[tuple[Any, ...], bool] = {}
        self._branches: dict[str, tuple[bool, Fraction]] = {}
        self._closed: dict[str, bool] = {}
        self._groups: dict[str, str] = {}

    def filters(self) -> LazyFilters:
        return LazyFilters(list(self.action.lists.queues()), self.decide, self.closed,
                           self.group)

    def branch_rules(self, theirs: str, queue_name: str) -> tuple[bool, Fraction]:
        """Whether the fair-share rules allow taking from the branch, and (else) the
        surplus the steady path allows."""
        branch = self._branches.get(theirs)
        if branch is None:
            branch = self.action.rules.branch(self.shares, self.reclaimer, self.paths,
                                              queue_name)
            if not branch[0] and self.type_open(queue_name):
                branch = (True, branch[1])
            self._branches[theirs] = branch
        return branch

    def type_open(self, queue_name: str) -> bool:
        """The per-type path may take from the queue's branch: it holds more than its
        share of a type this step may reclaim on."""
        types = self.action.session.proportion.gpu_types
        return types is not None and bool(self.kinds) and branch_over(
            types, self.job.queue, queue_name, self.kinds)

    def closed(self, queue_name: str) -> bool:
        """A whole branch (a child of a queue on the reclaimer's path) no rule may take
        from, or (with ``admissible_victim_steps``) none of whose queues has a smallest
        step the rules allow on its own."""
        shares = self.shares
        if queue_name not in shares or queue_name in self.mine:
            return False
        parent = shares[queue_name].parent
        if parent is not None and parent in shares and parent not in self.mine:
            return False  # not where the branches meet
        found = self._closed.get(queue_name)
        if found is None:
            allowed, surplus = self.branch_rules(queue_name, queue_name)
            found = not allowed and surplus <= 0
            if not found and self.action.behaviour.admissible_victim_steps:
                found = not any(
                    self.some_step_admissible(leaf, queue_name)
                    for leaf in _leaves_under(self.action.lists.tree(), queue_name)
                )
            self._closed[queue_name] = found
        return found

    def decide(self, queue_name: str) -> Callable[[Job], bool] | None:
        job, action = self.job, self.action
        if queue_name == job.queue or queue_name not in self.shares:
            return None
        theirs = self.group(queue_name)  # the branch the rules read for this queue
        allowed, surplus = self.branch_rules(theirs, queue_name)
        if not allowed and surplus <= 0:
            return None
        if action.behaviour.admissible_victim_steps and not self.some_step_admissible(
            queue_name, theirs
        ):
            return None
        types = action.session.proportion.gpu_types
        if types is not None:
            # Per GPU type, only branches over their share of the victim's type lose it.
            if allowed:
                return lambda victim: (action.not_protected(job, victim)
                                       and victim_allowed(types, job.queue, victim))
            return lambda victim: (
                action.first_step_gpus(victim) <= surplus
                and action.not_protected(job, victim)
                and victim_allowed(types, job.queue, victim))
        if allowed:
            return lambda victim: action.not_protected(job, victim)
        return lambda victim: (
            action.first_step_gpus(victim) <= surplus and action.not_protected(job, victim)
        )

    def group(self, queue_name: str) -> str:
        """For one victim step alone the rules read only the victim's branch where it
        meets the reclaimer's: a step refused from one queue of a branch is refused from
        every queue of it."""
        found = self._groups.get(queue_name)
        if found is None:
            found = self._groups[queue_name] = (
                _branch_of(self.shares, self.mine, queue_name)
                if queue_name in self.shares else queue_name
            )
        return found

    def some_step_admissible(self, victim_queue: str, theirs: str) -> bool:
        """Whether the queue's smallest conceivable victim step (the least GPU, CPU and
        memory of any of its pods) may be taken alone: the verdict only gets worse for a
        larger step, so a refusal rules the whole queue out. For one unit the rules read
        only the victim's branch where it meets the reclaimer's, so queues of one branch
        with the same least step share the verdict."""
        if self.type_open(victim_queue):
            return True  # the per-type path judges the victims it takes as a whole
        leaf = self.action.lists.leaf(victim_queue)
        least = None if leaf is None else leaf.least_gpu if self.gpu_only else leaf.least
        if least is None:
            return False
        key = (theirs, least)
        verdict = self._verdicts.get(key)
        if verdict is None:
            unit = res_natural(Res(*least))
            verdict = self._verdicts[key] = self.action.unit_admissible(
                self.reclaimer, victim_queue, unit
            )
        return verdict


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
    """A consolidating reclaim (victims moved, not only evicted) keeps to the rules'
    disruption bound (:func:`~.reclaim_rules.disruption_within`) with every victim pod,
    evicted or moved, counted."""
    if not outcome.moved:
        return True
    disrupted: Quantities = {r: Fraction(0) for r in RESOURCES}
    for pod in outcome.victim_order:
        for r, q in outcome.victim_quantities[pod.key].items():
            disrupted[r] = disrupted.get(r, Fraction(0)) + q
    return disruption_within(reclaimer, disrupted, ratio)
