"""The victim search shared by consolidation, reclaim and preempt (the job solver).

For one pending job's gang step the solver looks for a set of victims that makes room:

* Victim candidates come from a :class:`~.victim_queue.VictimQueue` one step at a time
  (whole gangs, or single elastic pods), in victim order, read from the cycle's shared
  per-queue lists (:mod:`.candidates`); the victims accumulate (:mod:`.scenario`).
* Two generators turn the accumulated victims into scenarios, least disruptive first:
  the victims of the jobs on one node of the latest victim, then all of them.
* A scenario that passes the cheap capacity filter (:mod:`.capacity`) is *simulated* on
  the live state inside the open statement (:mod:`.simulation`); the action's validator
  accepts or rejects the outcome.
* The step's pods are solved for 1, 2, 4, ... of them, each round starting from the
  victims the previous round needed, so a large gang does not search from scratch.

Everything is bounded by counts, never by time (:mod:`.budget`): simulations per
generator and round, a patience for the node-local generator, and a memo of scenarios
that already failed.

The parts: :class:`SearchRules` (what the action supplies), :class:`~.budget.SearchBudget`
(its accounting), :class:`~.figures.QueueFigures` (the queues' figures the rules read),
:class:`~.scenario.AccumulatedVictims` (one generator's scenario state),
:class:`~.simulation.Simulation` (one scenario on the live state).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gpushare.model import ACTIVE_ALLOCATED, Job, Pod
from gpushare.model.quantities import Quantities
from gpushare.scheduler.actions.common.budget import SearchBudget
from gpushare.scheduler.actions.common.candidates import LeafFilters, SearchSources, victim_lists
from gpushare.scheduler.actions.common.capacity import Capacity, Room
from gpushare.scheduler.actions.common.figures import QueueFigures
from gpushare.scheduler.actions.common.outcome import Outcome, Validator
from gpushare.scheduler.actions.common.relevance import StepNeeds
from gpushare.scheduler.actions.common.scenario import AccumulatedVictims, PodHashes, Scenario
from gpushare.scheduler.actions.common.simulation import Simulation
from gpushare.scheduler.actions.common.victim_queue import VictimQueue
from gpushare.scheduler.plugins.proportion.resource_share import QueueShare
from gpushare.scheduler.session import Session
from gpushare.scheduler.state import Statement

#: Simulations per generator in each round of a job's search before it gives up.
DEFAULT_MAX_SIMULATIONS = 256
#: Victim steps the node-local generator still tries once all victims so far would make
#: room in total (a step that needs several nodes is the next generator's).
NODE_LOCAL_PATIENCE = 32


@dataclass(frozen=True, slots=True)
class SearchRules:
    """What an action supplies to the search: its name and eviction reason, its
    candidates and validator, and its bounds."""

    action: str
    reason: str
    #: Per leaf queue the action may take from, which of its candidate jobs qualify
    #: (preemptible jobs holding something; :mod:`.candidates`).
    candidates: Callable[[Job, list[Pod]], LeafFilters]
    validator: Validator
    max_victim_jobs: int | None = None  # consolidation's preemptee cap
    #: Whether a victim's gang core is protected from the asking job (min-runtime).
    protected_core: Callable[[Job, Job], bool] | None = None
    max_simulations: int = DEFAULT_MAX_SIMULATIONS
    #: Whether the asking job is placed before the victims' jobs in the simulation
    #: (steady fair-share reclaim: what is freed must reach the reclaimer).
    preemptor_first: Callable[[Job], bool] | None = None
    #: Whether one victim step could be taken for the asking job's step on its own
    #: (with ``admissible_victim_steps``): a step the action's rules forbid alone is not
    #: added to the scenarios, so it cannot hold back every scenario after it.
    admissible: Callable[[Job, list[Pod], Job, list[Pod]], bool] | None = None
    #: Whether a victim placed again before the asking job first tries where it runs
    #: (with ``victims_stay_home``; not for consolidation, whose victims must make way).
    stay_before_asking: bool = False


@dataclass(slots=True)
class SearchMemo:
    """What the searches of one action remember: scenarios that failed, the candidate
    sources of the current job's search, and the capacity index."""

    failed: set[tuple[Any, ...]] = field(default_factory=set)
    hashes: PodHashes = field(default_factory=PodHashes)
    sources: dict[tuple[str, ...], SearchSources] = field(default_factory=dict)
    room: Room | None = None
    room_commits: int = -1


class Search:
    """One action's search: the session, the action's rules, and shared memo/limits."""

    __slots__ = ("budget", "commits", "figures", "memo", "rules", "session", "simulation")

    def __init__(self, session: Session, rules: SearchRules) -> None:
        self.session = session
        self.rules = rules
        self.budget = SearchBudget()
        self.figures = QueueFigures(session)
        self.memo = SearchMemo()
        #: Searches committed by the action so far (see :meth:`note_commit`).
        self.commits = 0
        self.simulation = Simulation(
            session, self.figures, rules.reason, rules.action, rules.validator,
            preemptor_first=rules.preemptor_first, stay_before_asking=rules.stay_before_asking,
        )

    def current_shares(self) -> dict[str, QueueShare]:
        """The queues' figures now (outside a search), kept until the next commit."""
        return self.figures.current(self.commits)

    def note_commit(self) -> None:
        """The action committed a search's outcome: the state has changed."""
        self.commits += 1

    # ------------------------------------------------------------------- solve
    def solve(self, stmt: Statement, job: Job, step: list[Pod]) -> Outcome | None:
        """Find victims for ``step`` (the job's next gang step); on success the statement
        holds the evictions and placements, on failure it is as it was."""
        self.budget.new_job()
        # Every round and generator starts from the state the search began with, which
        # only a committed search changes (a failed one is rolled back).
        self.memo.sources = {}
        self.current_shares()
        self._refresh_room()
        if self._cannot_make_room(job, step):
            self.budget.stats.prechecked += 1
            return None
        start = stmt.checkpoint()
        recorded: list[Pod] = []
        outcome: Outcome | None = None
        for k in round_sizes(len(step)):
            if outcome is not None:
                stmt.rollback(start)
            outcome = self._solve_partial(stmt, job, step[:k], recorded)
            if outcome is None:
                stmt.rollback(start)
                return None
            recorded = list(outcome.victim_order)
        return outcome

    def _refresh_room(self) -> None:
        memo = self.memo
        if memo.room is None:
            memo.room = Room(self.session)
        elif memo.room_commits != self.commits:
            memo.room.refresh()
        memo.room_commits = self.commits

    def _cannot_make_room(self, job: Job, step: list[Pod]) -> bool:
        """Whether no scenario could pass the capacity filter, so the search would end
        without a simulation: even every candidate victim together (plus what is free)
        does not make room for the first round's pods, or for the whole step. Exact:
        what victims free only grows with more victims, the first round has no earlier
        victims, and later rounds start from victims of earlier rounds' candidates.
        Candidates are read only until they would make room."""
        sizes = round_sizes(len(step))
        whole = Capacity(self.session, step, self.memo.room).accumulate([])
        first = Capacity(self.session, step[: sizes[0]], self.memo.room).accumulate([])
        seen: set[str] = set()
        for k in sizes:
            any_pods = False
            for candidate in self._candidate_jobs(job, step[:k]):
                pods = [
                    p for p in self.session.state.job_pods(candidate)
                    if p.status in ACTIVE_ALLOCATED and p.key not in seen
                ]
                any_pods = any_pods or bool(pods)
                seen.update(p.key for p in pods)
                whole.add(pods)
                if k == sizes[0]:
                    first.add(pods)
                    if whole.ok() and first.ok():
                        return False
                elif whole.ok():
                    return False
            if k == sizes[0]:
                if not any_pods:
                    return True  # nothing to evict: the first round has no scenario at all
                if len(sizes) > 1 and not first.ok():
                    return True
        return not whole.ok()

    def _sources(self, job: Job, partial: list[Pod]) -> SearchSources:
        """Per leaf queue, the shared candidate lists and this search's filter on them:
        the action's, and with ``victim_relevance`` only jobs that could free something
        the step lacks where they run (:mod:`.relevance`). Read lazily, queue by queue."""
        key = tuple(p.key for p in partial)
        found = self.memo.sources.get(key)
        if found is not None:
            return found
        session = self.session
        lists = victim_lists(session)
        filters = self.rules.candidates(job, partial)
        relevant, with_other = self.reads(job, partial)
        needs = None
        if relevant:
            def may_take(victim: Job) -> bool:
                take = filters.get(victim.queue)
                return victim.preemptible and take is not None and take(victim)

            needs = StepNeeds(session.state, partial, may_take, lists.gpu_holders)
        found = SearchSources(session, lists, filters, needs, with_other, self.budget.work)
        self.memo.sources[key] = found
        return found

    def reads(self, job: Job, partial: list[Pod]) -> tuple[bool, bool]:
        """Whether the search for ``partial`` applies the relevance test, and whether it
        reads jobs that hold no GPU at all (not while every node has the CPU, memory and
        pod room the step needs). A queue limit that blocks the step is freed by victims
        on any node: no relevance test then."""
        session = self.session
        relevant = (session.behaviour.victim_relevance
                    and session.proportion.check_capacity(job, partial).ok)
        with_other = not relevant or victim_lists(session).non_gpu_room_short(
            sum(p.cpu_millis for p in partial), sum(p.memory_bytes for p in partial),
            len(partial),
        )
        return relevant, with_other

    def _candidate_jobs(self, job: Job, partial: list[Pod]) -> Iterator[Job]:
        """Every candidate job of the search (list order, not victim order)."""
        sources = self._sources(job, partial)
        for leaf in sources:
            source = sources.get(leaf)
            if source is None:
                continue
            lists, accept, _ = source
            for entries in lists:
                for _, candidate in reversed(entries):
                    if accept(candidate):
                        yield candidate

    def _solve_partial(
        self, stmt: Statement, job: Job, partial: list[Pod], recorded: list[Pod],
    ) -> Outcome | None:
        """Two generators, least disruptive first: victims on one node at a time (the
        victims accumulated so far that sit on a node of the latest victim), then the
        accumulated victims on every node (for gangs spanning nodes)."""
        for node_local in (True, False):
            self.budget.new_generator(self.rules.max_simulations)
            outcome = self._generate(stmt, job, partial, recorded, node_local)
            if outcome is not None or self.budget.spent:
                return outcome
        return None

    def _victim_queue(self, job: Job, sources: SearchSources,
                      recorded: list[Pod]) -> VictimQueue:
        guard = self.rules.protected_core
        protected: Callable[[Job], bool] = (
            _semi_core if guard is None
            else (lambda victim: victim.semi_preemptible or guard(job, victim))
        )
        state = self.session.state
        lookahead = self.session.behaviour.victim_lookahead
        return VictimQueue(sources, state.job_pods, self.figures.snapshot,
                           self.figures.totals(), recorded, state.jobs, protected,
                           lookahead=lookahead,
                           count_taken=self.session.behaviour.earlier_victims_given_up,
                           untaken=self.simulation.memo.untaken,
                           tree=None if lookahead else sources.lists.tree())

    def _generate(
        self, stmt: Statement, job: Job, partial: list[Pod], recorded: list[Pod],
        node_local: bool,
    ) -> Outcome | None:
        behaviour = self.session.behaviour
        queue = self._victim_queue(job, self._sources(job, partial), recorded)
        admissible = self.rules.admissible if behaviour.admissible_victim_steps else None
        capacity = Capacity(self.session, partial, self.memo.room)
        victims = AccumulatedVictims(recorded, capacity, self.memo.hashes)
        # Scenarios across nodes leave out victims on nodes that could not host any pod
        # of the step (every pod asks for GPUs: a GPU test).
        prune = behaviour.prune_scenarios and capacity.every_pod_wants_gpu
        partial_keys = tuple(p.key for p in partial)
        first = True
        patience = NODE_LOCAL_PATIENCE
        while True:
            scenarios: list[Scenario] = []
            if first:
                first = False
                scenarios = victims.recorded_scenarios()
            elif node_local:
                if victims.base.ok():
                    # Once every victim so far would make room but no single node's
                    # victims do, the step needs several nodes: leave it to the next
                    # generator rather than scan every candidate.
                    patience -= 1
                    if patience < 0:
                        return None
                    scenarios = victims.node_local()
            elif prune and victims.base.ok():
                scenarios = [victims.on_hosting_nodes(len(partial))]
            elif not prune:
                scenarios = [victims.everything()]
            for scenario in scenarios:
                fingerprint = (partial_keys, len(scenario.victims), scenario.digest)
                outcome = self._try(stmt, job, partial, fingerprint, scenario,
                                    victims.quantities, capacity)
                if outcome is not None:
                    return outcome
                if self.budget.simulations_left <= 0:
                    return None
            # The action's first search is never cut, so every cycle decides something.
            if self.budget.runs_out():
                return None
            nxt = queue.pop()
            if nxt is None:
                return None
            self.budget.new_step()
            victim_job, offered = nxt
            if admissible is not None and not admissible(job, partial, victim_job, offered):
                self.budget.stats.inadmissible += 1
                queue.refuse(victim_job.queue, offered)
                continue
            if victims.new_job_over(victim_job.key, self.rules.max_victim_jobs):
                return None
            victims.add(victim_job.key, offered)

    def _try(
        self, stmt: Statement, job: Job, partial: list[Pod], fingerprint: tuple[Any, ...],
        scenario: Scenario, quantities: dict[str, Quantities], capacity: Capacity,
    ) -> Outcome | None:
        stats = self.budget.stats
        stats.scenarios += 1
        if fingerprint in self.memo.failed:
            stats.deduplicated += 1
            return None
        fits = scenario.fits
        if not (capacity.fits(scenario.victims) if fits is None else fits):
            stats.filtered += 1
            return None
        self.budget.simulations_left -= 1
        stats.simulations += 1
        outcome = self.simulation.run(stmt, job, partial, scenario.victims, quantities)
        if outcome is None:
            self.memo.failed.add(fingerprint)
        return outcome


def round_sizes(n: int) -> list[int]:
    """1, 2, 4, ... up to n, always ending with n."""
    sizes: list[int] = []
    k = 1
    while k < n:
        sizes.append(k)
        k *= 2
    sizes.append(n)
    return sizes


def _semi_core(victim: Job) -> bool:
    """A semi-preemptible victim offers only its burst: its core is never taken."""
    return victim.semi_preemptible
