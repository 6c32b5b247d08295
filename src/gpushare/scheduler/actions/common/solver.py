"""The victim search shared by consolidation, reclaim and preempt.

For one pending job's gang step the solver looks for a set of victims that makes room:

* Victim candidates come from a :class:`~.victim_queue.VictimQueue` one step at a time
  (whole gangs, or single elastic pods), in victim order, read from the cycle's shared
  per-queue lists (:mod:`.candidates`); the victims accumulate.
* Two generators turn the accumulated victims into scenarios, least disruptive first:
  the victims of the jobs on one node of the latest victim, then all of them.
* A scenario that passes the cheap capacity filter (:mod:`.capacity`) is *simulated* on
  the live state inside the open statement: evict the victims, then place the
  preemptor's step and give each victim job one gang step back, in fair order. Victims
  that land again elsewhere are moved (Pipelined on their new node), those that land
  where they are stay as they were, the others are evicted (Releasing). The action's
  validator then accepts or rejects the outcome; a rejected one is rolled back.
* The step's pods are solved for 1, 2, 4, ... of them, each round starting from the
  victims the previous round needed, so a large gang does not search from scratch.

Everything is bounded by counts, never by time: simulations per generator and round, a
patience for the node-local generator, and a memo of scenarios that already failed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from gpushare.model import ACTIVE_ALLOCATED, Job, Pod, PodStatus
from gpushare.model.quantities import MILLI, RESOURCES
from gpushare.scheduler.actions.common.candidates import LeafFilters, SearchSources, victim_lists
from gpushare.scheduler.actions.common.capacity import Capacity, Room
from gpushare.scheduler.actions.common.ordering import CompareMemo, pick_fair
from gpushare.scheduler.actions.common.relevance import StepNeeds
from gpushare.scheduler.actions.common.victim_queue import VictimQueue, pod_quantities
from gpushare.scheduler.gang import GangView
from gpushare.scheduler.ordering import job_order_key
from gpushare.scheduler.placement import place_pod, place_step
from gpushare.scheduler.plugins.proportion.resource_share import Quantities, QueueShare
from gpushare.scheduler.session import Session
from gpushare.scheduler.state import Statement

#: Simulations per generator in each round of a job's search before it gives up.
DEFAULT_MAX_SIMULATIONS = 256
#: Victim steps the node-local generator still tries once all victims so far would make
#: room in total (a step that needs several nodes is the next generator's).
NODE_LOCAL_PATIENCE = 32
#: Entries kept by the per-action memos before they start afresh (memory only: the
#: memos never change a result).
_SHARE_CACHE_LIMIT = 50_000
_COMPARE_MEMO_LIMIT = 500_000


@dataclass(slots=True)
class Outcome:
    """What a successful simulation did."""

    preemptor: Job
    placed: list[Pod]
    evicted: list[Pod]  # victims that did not land again
    moved: list[Pod]  # victims placed again (Pipelined on their new node)
    victim_quantities: dict[str, Quantities]  # pod key -> what it held before eviction
    victim_order: list[Pod]  # evicted and moved victims, in the order the search took them

    def victim_jobs(self) -> dict[str, list[Pod]]:
        out: dict[str, list[Pod]] = {}
        for pod in self.victim_order:
            out.setdefault(pod.job, []).append(pod)
        return out


Validator = Callable[[Outcome], bool]


@dataclass(slots=True)
class SearchStats:
    jobs: int = 0
    scenarios: int = 0
    filtered: int = 0
    simulations: int = 0
    deduplicated: int = 0
    prechecked: int = 0  # jobs skipped because no victims could make room
    inadmissible: int = 0  # victim steps the rules forbid on their own, not added
    steps: int = 0  # victim steps read


#: Units of search work, the action's search budget's currency: one per victim candidate
#: examined (read through the search's filters), :data:`STEP_WORK` per victim step taken
#: (picking it, accounting for it, trying scenarios with it), :data:`GENERATOR_WORK` per
#: scenario generator started (a round of a gang's search, node-local or across nodes)
#: and :data:`SEARCH_WORK` per job searched for. The weights are what each costs relative
#: to examining one candidate, fitted on large saturated clusters (docs/performance.md):
#: counts stand in for time, so that a cycle stays deterministic.
STEP_WORK = 16
GENERATOR_WORK = 128
SEARCH_WORK = 128


@dataclass(slots=True)
class Search:
    """One action's search: the session, the action's rules, and shared memo/limits."""

    session: Session
    action: str
    reason: str
    #: Per leaf queue the action may take from, which of its candidate jobs qualify
    #: (preemptible jobs holding something; :mod:`.candidates`).
    candidates: Callable[[Job, list[Pod]], LeafFilters]
    validator: Validator
    max_victim_jobs: int | None = None  # consolidation's preemptee cap
    protected_core: Callable[[Job, Job], bool] | None = None
    max_simulations: int = DEFAULT_MAX_SIMULATIONS
    #: Whether the asking job is placed before the victims' jobs in the simulation
    #: (steady fair-share reclaim: what is freed must reach the reclaimer).
    preemptor_first: Callable[[Job], bool] | None = None
    #: Whether one victim step could be taken for the asking job's step on its own
    #: (outside ``compat: kai``): a step the action's rules forbid alone is not added to
    #: the scenarios, so it cannot hold back every scenario after it.
    admissible: Callable[[Job, list[Pod], Job, list[Pod]], bool] | None = None
    #: Whether a victim placed again before the asking job first tries where it runs
    #: (outside ``compat: kai``; not for consolidation, whose victims must make way).
    stay_before_asking: bool = False
    stats: SearchStats = field(default_factory=SearchStats)
    #: Search work the action may do this cycle (0: no bound; see :data:`STEP_WORK`),
    #: and how much it has done (one cell, shared with the searches' sources, which
    #: count each candidate examined). A search that runs out stops undecided, between
    #: two victim steps, and sets :attr:`spent` (the action's first search runs to its
    #: own bounds, so that every cycle can decide something).
    budget: int = 0
    work: list[int] = field(default_factory=lambda: [0])
    spent: bool = False
    #: The queues' figures when the current job's search began (what the rules read).
    snapshot: dict[str, QueueShare] = field(default_factory=dict)
    _failed: set[tuple[Any, ...]] = field(default_factory=set)
    _budget: int = 0
    _hashes: dict[str, int] = field(default_factory=dict)
    _share_cache: dict[tuple[Any, ...], QueueShare] = field(default_factory=dict)
    _compared: CompareMemo = field(default_factory=CompareMemo)
    _totals: dict[str, Fraction] | None = None
    _requests: dict[tuple[str, ...], Quantities] = field(default_factory=dict)
    _candidate_memo: dict[tuple[str, ...], SearchSources] = field(default_factory=dict)
    _room: Room | None = None
    _last_shares: dict[str, QueueShare] = field(default_factory=dict)
    _last_versions: dict[str, int] = field(default_factory=dict)
    #: Searches committed by the action so far (see :meth:`note_commit`).
    commits: int = 0
    _seen_commits: int = -1
    _room_commits: int = -1
    _untaken: dict[tuple[int, int], tuple[QueueShare, QueueShare, int]] = field(
        default_factory=dict
    )

    # ------------------------------------------------------------------ shares
    def shares(self) -> dict[str, QueueShare]:
        """The queues' figures now, frozen for the rules while one job is solved (a new
        mapping each time; only queues whose usage changed since the last call are
        looked up again)."""
        usage = self.session.state.queue_usage
        known = self._last_shares
        for name in self.session.state.queues:
            version = usage[name].version
            if self._last_versions.get(name) != version or name not in known:
                known[name] = self._share(name)
                self._last_versions[name] = version
        if len(known) != len(self.session.state.queues):
            for name in [n for n in known if n not in self.session.state.queues]:
                del known[name]
        return dict(known)

    def _share(self, name: str) -> QueueShare:
        """One queue's figures now. Quotas, limits and fair shares do not change during an
        action, so a queue's figures follow from its allocations alone: the same
        allocations give back the very same object (a simulation that puts victims back
        where they were meets the figures, and the comparisons, it already knows)."""
        s = self.session
        usage = s.state.queue_usage[name]
        key = (name, usage.allocated, usage.allocated_np)
        hit = self._share_cache.get(key)
        if hit is not None:
            return hit
        queue = s.state.queues[name]
        fair, alloc, alloc_np = s.fair(name), s.allocated(name), s.allocated_np(name)
        share = QueueShare(
            name=name,
            parent=queue.parent if queue.parent in s.state.queues else None,
            priority=queue.priority,
            created_at=queue.created_at,
            deserved={r: queue.resources[r].quota for r in RESOURCES},
            limit={r: queue.resources[r].limit for r in RESOURCES},
            fair_share=dict(zip(RESOURCES, fair, strict=True)),
            allocated=dict(zip(RESOURCES, alloc, strict=True)),
            allocated_np=dict(zip(RESOURCES, alloc_np, strict=True)),
        )
        if len(self._share_cache) >= _SHARE_CACHE_LIMIT:
            self._share_cache.clear()  # bounded memory; the figures are recomputed alike
        self._share_cache[key] = share
        return share

    def _branch_shares(self, leaves: Iterator[str]) -> dict[str, QueueShare]:
        """The figures of these leaf queues and their ancestors (all fair order reads)."""
        queues = self.session.state.queues
        out: dict[str, QueueShare] = {}
        for leaf in leaves:
            current: str | None = leaf
            while current is not None and current in queues and current not in out:
                share = out[current] = self._share(current)
                current = share.parent
        return out

    def totals(self) -> dict[str, Fraction]:
        """The cluster's capacity (fixed for the session: one mapping, read-only)."""
        if self._totals is None:
            self._totals = dict(zip(RESOURCES, self.session.capacity, strict=True))
        return self._totals

    # ------------------------------------------------------------------- solve
    def current_shares(self) -> dict[str, QueueShare]:
        """The queues' figures now (outside a search), kept as :attr:`snapshot` until the
        next commit."""
        if self._seen_commits != self.commits:
            self.snapshot = self.shares()
            self._seen_commits = self.commits
        return self.snapshot

    def out_of_budget(self) -> bool:
        return 0 < self.budget <= self.work[0]

    def note_commit(self) -> None:
        """The action committed a search's outcome: the state has changed."""
        self.commits += 1

    def solve(self, stmt: Statement, job: Job, step: list[Pod]) -> Outcome | None:
        """Find victims for ``step`` (the job's next gang step); on success the statement
        holds the evictions and placements, on failure it is as it was."""
        self.stats.jobs += 1
        self.work[0] += SEARCH_WORK
        self._budget = self.max_simulations
        # Every round and generator starts from the state the search began with, which
        # only a committed search changes (a failed one is rolled back).
        self._candidate_memo = {}
        shares = self.current_shares()
        if self._room is None:
            self._room = Room(self.session)
        elif self._room_commits != self.commits:
            self._room.refresh()
        self._room_commits = self.commits
        totals = self.totals()
        if self._cannot_make_room(job, step):
            self.stats.prechecked += 1
            return None
        start = stmt.checkpoint()
        recorded: list[Pod] = []
        outcome: Outcome | None = None
        for k in _round_sizes(len(step)):
            if outcome is not None:
                stmt.rollback(start)
            outcome = self._solve_partial(stmt, job, step[:k], recorded, shares, totals)
            if outcome is None:
                stmt.rollback(start)
                return None
            recorded = list(outcome.victim_order)
        return outcome

    def _cannot_make_room(self, job: Job, step: list[Pod]) -> bool:
        """Whether no scenario could pass the capacity filter, so the search would end
        without a simulation: even every candidate victim together (plus what is free)
        does not make room for the first round's pods, or for the whole step. Exact:
        what victims free only grows with more victims, the first round has no earlier
        victims, and later rounds start from victims of earlier rounds' candidates.
        Candidates are read only until they would make room."""
        sizes = _round_sizes(len(step))
        whole = Capacity(self.session, step, self._room).accumulate([])
        first = Capacity(self.session, step[: sizes[0]], self._room).accumulate([])
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
        the action's, and outside ``compat: kai`` only jobs that could free something the
        step lacks where they run (:mod:`.relevance`). Read lazily, queue by queue."""
        key = tuple(p.key for p in partial)
        found = self._candidate_memo.get(key)
        if found is not None:
            return found
        session = self.session
        lists = victim_lists(session)
        filters = self.candidates(job, partial)
        relevant, with_other = self.reads(job, partial)
        needs = None
        if relevant:
            def may_take(victim: Job) -> bool:
                take = filters.get(victim.queue)
                return victim.preemptible and take is not None and take(victim)

            needs = StepNeeds(session.state, partial, may_take, lists.gpu_holders)
        found = SearchSources(session, lists, filters, needs, with_other, self.work)
        self._candidate_memo[key] = found
        return found

    def reads(self, job: Job, partial: list[Pod]) -> tuple[bool, bool]:
        """Whether the search for ``partial`` applies the relevance test, and whether it
        reads jobs that hold no GPU at all (not while every node has the CPU, memory and
        pod room the step needs). A queue limit that blocks the step is freed by victims
        on any node: no relevance test then."""
        session = self.session
        relevant = not session.config.kai and session.check_capacity(job, partial).ok
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
        shares: dict[str, QueueShare], totals: dict[str, Fraction],
    ) -> Outcome | None:
        """Two generators, least disruptive first: victims on one node at a time (the
        victims accumulated so far that sit on a node of the latest victim), then the
        accumulated victims on every node (for gangs spanning nodes)."""
        for node_local in (True, False):
            self._budget = self.max_simulations
            outcome = self._generate(stmt, job, partial, recorded, shares, totals, node_local)
            if outcome is not None or self.spent:
                return outcome
        return None

    def _generate(
        self, stmt: Statement, job: Job, partial: list[Pod], recorded: list[Pod],
        shares: dict[str, QueueShare], totals: dict[str, Fraction], node_local: bool,
    ) -> Outcome | None:
        self.work[0] += GENERATOR_WORK
        sources = self._sources(job, partial)
        protected = None
        if self.protected_core is not None:
            guard = self.protected_core
            protected = lambda victim: guard(job, victim)  # noqa: E731
        state = self.session.state
        queue = VictimQueue(sources, state.job_pods, shares, totals, recorded, state.jobs,
                            protected, lookahead=self.session.config.kai,
                            untaken=self._untaken,
                            tree=None if self.session.config.kai else sources.lists.tree())
        admissible = None if self.session.config.kai else self.admissible
        capacity = Capacity(self.session, partial, self._room)
        base = capacity.accumulate(recorded)  # recorded + accumulated, kept up to date
        # Outside compat: kai, scenarios across nodes leave out victims on nodes that
        # could not host any pod of the step (every pod asks for GPUs: a GPU test).
        prune = not self.session.config.kai and capacity.every_pod_wants_gpu
        accumulated: list[Pod] = []
        by_job: dict[str, list[Pod]] = {}  # accumulated victims per job
        jobs_on_node: dict[str, set[str]] = {}
        victim_jobs = {p.job for p in recorded}
        quantities = {p.key: pod_quantities(p) for p in recorded}
        partial_keys = tuple(p.key for p in partial)
        recorded_hash = self._set_hash(recorded)
        accumulated_hash = 0
        latest: list[Pod] = []
        first = True
        patience = NODE_LOCAL_PATIENCE
        while True:
            scenarios: list[tuple[list[Pod], int, bool | None]] = []
            if first:
                first = False
                if recorded:
                    scenarios.append((list(recorded), recorded_hash, base.ok()))
            elif node_local:
                if base.ok():
                    # Once every victim so far would make room but no single node's
                    # victims do, the step needs several nodes: leave it to the next
                    # generator rather than scan every candidate.
                    patience -= 1
                    if patience < 0:
                        return None
                    seen: set[int] = set()
                    for node in sorted({p.node for p in latest if p.node is not None}):
                        # Whole victim steps of every job that has a victim on the node.
                        on_node = [p for j in sorted(jobs_on_node[node]) for p in by_job[j]]
                        digest = recorded_hash ^ self._set_hash(on_node)
                        if digest not in seen:
                            seen.add(digest)
                            scenarios.append((recorded + on_node, digest, None))
            elif prune and base.ok():
                # Only victim steps on the first nodes (in the order their victims came)
                # that could then host the step's pods between them: victims elsewhere
                # free room no pod needs. Adding a victim that changes nothing gives the
                # same scenario, which is not simulated again.
                chosen_nodes: list[str] = []
                hostable = 0
                for node in jobs_on_node:
                    count = base.pods_hostable(node)
                    if count:
                        chosen_nodes.append(node)
                        hostable += count
                        if hostable >= len(partial):
                            break
                chosen_jobs = sorted({j for node in chosen_nodes for j in jobs_on_node[node]})
                chosen = [p for j in chosen_jobs for p in by_job[j]]
                scenarios.append(
                    (recorded + chosen, recorded_hash ^ self._set_hash(chosen), None)
                )
            elif not prune:
                scenarios.append(
                    (recorded + accumulated, recorded_hash ^ accumulated_hash, base.ok())
                )
            for victims, digest, fits in scenarios:
                fingerprint = (partial_keys, len(victims), digest)
                outcome = self._try(stmt, job, partial, fingerprint, victims, quantities,
                                    capacity, fits)
                if outcome is not None:
                    return outcome
                if self._budget <= 0:
                    return None
            # The action's first search is never cut, so every cycle decides something.
            if self.stats.jobs > 1 and self.out_of_budget():
                self.spent = True
                return None
            nxt = queue.pop()
            if nxt is None:
                return None
            self.stats.steps += 1
            self.work[0] += STEP_WORK
            victim_job, offered = nxt
            if admissible is not None and not admissible(job, partial, victim_job, offered):
                self.stats.inadmissible += 1
                queue.refuse(victim_job.queue, offered)
                continue
            latest = offered
            if (
                self.max_victim_jobs is not None
                and victim_job.key not in victim_jobs
                and len(victim_jobs) >= self.max_victim_jobs
            ):
                return None
            victim_jobs.add(victim_job.key)
            for pod in latest:
                quantities[pod.key] = pod_quantities(pod)
                by_job.setdefault(pod.job, []).append(pod)
                if pod.node is not None:
                    jobs_on_node.setdefault(pod.node, set()).add(pod.job)
            accumulated.extend(latest)
            accumulated_hash ^= self._set_hash(latest)
            base.add(latest)

    def _set_hash(self, pods: Sequence[Pod]) -> int:
        """An order-free 64-bit digest of a set of pods (stable across runs)."""
        digest = 0
        for pod in pods:
            value = self._hashes.get(pod.key)
            if value is None:
                value = int.from_bytes(
                    hashlib.blake2b(pod.key.encode(), digest_size=8).digest(), "big"
                )
                self._hashes[pod.key] = value
            digest ^= value
        return digest

    def _try(
        self, stmt: Statement, job: Job, partial: list[Pod], fingerprint: tuple[Any, ...],
        victims: list[Pod], quantities: dict[str, Quantities], capacity: Capacity,
        fits: bool | None,
    ) -> Outcome | None:
        self.stats.scenarios += 1
        if fingerprint in self._failed:
            self.stats.deduplicated += 1
            return None
        if not (capacity.fits(victims) if fits is None else fits):
            self.stats.filtered += 1
            return None
        self._budget -= 1
        self.stats.simulations += 1
        outcome = self._simulate(stmt, job, partial, victims, quantities)
        if outcome is None:
            self._failed.add(fingerprint)
        return outcome

    # -------------------------------------------------------------- simulation
    def _simulate(
        self, stmt: Statement, job: Job, partial: list[Pod], victims: list[Pod],
        quantities: dict[str, Quantities],
    ) -> Outcome | None:
        session = self.session
        cp = stmt.checkpoint()
        before = {p.key: (p.status, p.node, p.gpu_indices, p.portion) for p in victims}
        for pod in victims:
            stmt.evict(pod, self.reason, self.action)
        victim_keys = {p.key for p in victims}
        by_job: dict[str, list[Pod]] = {}
        for pod in victims:
            by_job.setdefault(pod.job, []).append(pod)
        steps: dict[str, list[Pod]] = {job.key: partial}
        for key, pods in by_job.items():
            if key != job.key:
                steps[key] = self._replacement_step(session.state.jobs[key], pods, victim_keys)
        placed_preemptor = False
        kai = session.config.kai
        handled: set[str] = set()
        for nxt in self._fair_order(steps):
            handled.add(nxt.key)
            step = steps[nxt.key]
            if nxt.key == job.key:
                if not session.check_capacity(job, step).ok:
                    break
                # KAI pipelines every pod of the step; gpushare binds the step when all of
                # it fits on free capacity (place_step pipelines it all otherwise).
                if not place_step(session, stmt, job, step, pipeline_only=kai).ok:
                    break
                placed_preemptor = True
                if not kai:
                    break
            else:
                self._place_again(stmt, nxt, step, before, home_first=self.stay_before_asking)
        if not placed_preemptor:
            stmt.rollback(cp)
            return None
        if not kai:
            self._settle_victims(stmt, {k: v for k, v in steps.items() if k not in handled},
                                 before)
        evicted = [p for p in victims if p.status not in ACTIVE_ALLOCATED]
        moved = [p for p in victims if p.status is PodStatus.PIPELINED]
        if any(p.status is PodStatus.BINDING for p in partial) and (
            moved or _moved_this_cycle(session)
        ):
            # A moved pod still runs on its old node until it is gone, which the state no
            # longer shows: nothing placed this cycle may count on binding now.
            for pod in partial:
                if pod.status is PodStatus.BINDING:
                    stmt.pipeline(pod, pod.node, pod.gpu_indices, pod.portion)  # type: ignore[arg-type]
        taken = [p for p in victims if p in evicted or p in moved]
        outcome = Outcome(job, list(partial), evicted, moved, dict(quantities), taken)
        if not self.validator(outcome):
            stmt.rollback(cp)
            return None
        return outcome

    def _settle_victims(
        self, stmt: Statement, rest: dict[str, list[Pod]],
        before: Mapping[str, tuple[PodStatus, str | None, tuple[int, ...], int]],
    ) -> None:
        """The victims left once the asking job is placed: every victim step that still
        fits where it runs stays there, whole; the others are placed again in fair order.

        Putting unneeded victims back first means a victim moved for another one never
        displaces a victim that could have stayed, and most victims of a wide scenario
        cost one check instead of a placement search."""
        if not rest:
            return
        session = self.session
        jobs = session.state.jobs
        elsewhere: dict[str, list[Pod]] = {}
        for key, step in rest.items():
            if not step or not session.check_capacity(jobs[key], step).ok:
                continue  # it cannot come back at all (as in _place_again)
            cp = stmt.checkpoint()
            if all(self._back_home(pod, before[pod.key]) for pod in step):
                continue
            stmt.rollback(cp)
            elsewhere[key] = step
        if not elsewhere:
            return
        for nxt in self._fair_order(elsewhere, asking=False):
            self._place_again(stmt, nxt, elsewhere[nxt.key], before, home_first=True)

    def _place_again(
        self, stmt: Statement, job: Job, step: list[Pod],
        before: Mapping[str, tuple[PodStatus, str | None, tuple[int, ...], int]],
        home_first: bool = False,
    ) -> bool:
        """Place a victim job's step again, all or nothing, pod by pod (so that a pod
        that lands back home keeps its old place before the next one is placed).

        Once the asking job is placed, a victim that still fits where it runs stays there
        (outside ``compat: kai``); before that, it is placed like any pod, so that it can
        make way for the asking job (consolidation)."""
        session = self.session
        if not step or not session.check_capacity(job, step).ok:
            return False
        cp = stmt.checkpoint()
        home_first = home_first and not session.config.kai
        for pod in step:
            if home_first and self._back_home(pod, before[pod.key]):
                continue
            if place_pod(session, stmt, pod, pipeline_only=True) is None:
                stmt.rollback(cp)
                return False
            self._stay_if_back_home(pod, before[pod.key])
        return True

    def _back_home(
        self, pod: Pod, was: tuple[PodStatus, str | None, tuple[int, ...], int]
    ) -> bool:
        """Put a victim back exactly where it runs when that still has room for it, so
        it keeps running (KAI places victims again like any pod, which may move one that
        did not have to move)."""
        status, node, gpu_indices, portion = was
        if node is None or status not in _ON_NODE:
            return False
        state = self.session.state
        usage = state.usage.get(node)
        if usage is None or not usage.node.ready:
            return False
        if (
            usage.pods_free_future() < 1
            or pod.cpu_millis > usage.cpu_free_future()
            or pod.memory_bytes > usage.mem_free_future()
        ):
            return False
        need = MILLI if pod.gpu.whole else portion if pod.gpu.is_shared else 0
        if any(usage.gpu_free_future(i) < need for i in gpu_indices):
            return False
        state.set_pod(pod, status, node, gpu_indices, portion)
        return True

    def _stay_if_back_home(
        self, pod: Pod, was: tuple[PodStatus, str | None, tuple[int, ...], int]
    ) -> None:
        """A victim placed again where it runs (its node; for a GPU share, the same GPU)
        is not moved at all: it keeps running as it was, when its old GPUs were not
        handed to someone else meanwhile."""
        status, node, gpu_indices, portion = was
        if pod.status is not PodStatus.PIPELINED or pod.node != node or node is None:
            return
        if status not in (PodStatus.RUNNING, PodStatus.BINDING):
            return
        if pod.gpu.is_shared and tuple(sorted(pod.gpu_indices)) != tuple(sorted(gpu_indices)):
            return  # a share on another GPU of the node is a move
        state = self.session.state
        moved_to = (pod.gpu_indices, pod.portion)
        state.set_pod(pod, status, node, gpu_indices, portion)
        usage = state.usage[node]
        fits = (
            usage.cpu_free_future() >= 0
            and usage.mem_free_future() >= 0
            and usage.pods_free_future() >= 0
            and all(usage.gpu_free_future(i) >= 0 for i in gpu_indices)
        )
        if not fits:
            state.set_pod(pod, PodStatus.PIPELINED, node, *moved_to)

    def _replacement_step(self, job: Job, evicted: list[Pod], victim_keys: set[str]) -> list[Pod]:
        """One gang step of a victim job's evicted pods: what it may get back."""
        pods = self.session.state.job_pods(job)
        shadow: list[Pod] = []
        for pod in pods:
            if pod.key in victim_keys:
                shadow.append(replace(pod, status=PodStatus.PENDING, node=None))
            elif pod.status in ACTIVE_ALLOCATED or pod.status is PodStatus.SUCCEEDED:
                shadow.append(pod)
        step = GangView(job, shadow).next_step()
        if not step:
            return []
        by_key = {p.key: p for p in evicted}
        real = [by_key[p.key] for p in step if p.key in by_key]
        return real if len(real) == len(step) else []

    def _fair_order(self, steps: dict[str, list[Pod]], asking: bool = True) -> Iterator[Job]:
        """The preemptor and the victim jobs in fair order, re-evaluated after each one
        (each side compared with the step it would place)."""
        session = self.session
        jobs = session.state.jobs
        left = dict(steps)
        totals = self.totals()
        first = next(iter(steps))  # the asking job
        # Most comparisons recur between picks and between simulations of one search.
        if len(self._untaken) >= _COMPARE_MEMO_LIMIT:
            self._untaken.clear()
        if len(self._compared) >= _COMPARE_MEMO_LIMIT:
            self._compared = CompareMemo()
        memo = self._compared
        keys: dict[str, tuple[Any, ...]] = {}

        def order_key(j: Job) -> tuple[Any, ...]:
            # A job's order key changes only when its own pods do, and a job leaves the
            # order as soon as its pods are placed.
            if j.key not in keys:
                keys[j.key] = job_order_key(session, j)
            return keys[j.key]

        def request_of(key: str) -> Quantities:
            # One mapping per job, so the memo recognises an unchanged request by identity.
            pods = left[key]
            step_key = tuple(p.key for p in pods)
            asked = self._requests.get(step_key)
            if asked is None:
                if len(self._requests) >= _SHARE_CACHE_LIMIT:
                    self._requests.clear()
                vec = session.step_request(pods, session.min_gpu_memory)
                asked = self._requests[step_key] = dict(zip(RESOURCES, vec, strict=True))
            return asked

        if asking and self.preemptor_first is not None and self.preemptor_first(jobs[first]):
            del left[first]
            yield jobs[first]
        by_leaf: dict[str, list[Job]] = {}
        for key in left:
            by_leaf.setdefault(jobs[key].queue, []).append(jobs[key])
        # Only the leaf a job was taken from gets a new best job.
        best = {leaf: min(candidates, key=order_key) for leaf, candidates in by_leaf.items()}
        while left:
            requests = {leaf: request_of(j.key) for leaf, j in best.items()}
            leaf = pick_fair(self._branch_shares(iter(requests)), totals, requests, memo)
            if leaf is None:
                return
            chosen = best[leaf]
            del left[chosen.key]
            rest = by_leaf[leaf]
            rest.remove(chosen)
            if rest:
                best[leaf] = min(rest, key=order_key)
            else:
                del best[leaf]
            yield chosen


def _moved_this_cycle(session: Session) -> bool:
    """Whether an earlier search of this cycle moved a running pod to another node."""
    state = session.state
    for key, before in state.touched().items():
        pod = state.pods.get(key)
        if pod is not None and pod.status is PodStatus.PIPELINED and before in _ON_NODE:
            return True
    return False


_ON_NODE = frozenset({PodStatus.RUNNING, PodStatus.BINDING})


def _round_sizes(n: int) -> list[int]:
    """1, 2, 4, ... up to n, always ending with n."""
    sizes: list[int] = []
    k = 1
    while k < n:
        sizes.append(k)
        k *= 2
    sizes.append(n)
    return sizes


def victim_units(
    outcome: Outcome, jobs: Mapping[str, Job], count_moved: bool
) -> dict[str, list[Quantities]]:
    """Per leaf queue, what the victims give up: each elastic pod on its own, a job's core
    as one unit. Moved victims give up nothing unless ``count_moved``."""
    units: dict[str, list[Quantities]] = {}
    moved = {p.key for p in outcome.moved}
    for job_key, pods in outcome.victim_jobs().items():
        job = jobs[job_key]
        core, elastic = _split_core(job, pods)
        queue_units = units.setdefault(job.queue, [])
        for pod in elastic:
            if count_moved or pod.key not in moved:
                queue_units.append(outcome.victim_quantities[pod.key])
        core_total: Quantities | None = None
        for pod in core:
            if not count_moved and pod.key in moved:
                continue
            q = outcome.victim_quantities[pod.key]
            core_total = q if core_total is None else {r: core_total[r] + q[r] for r in RESOURCES}
        if core_total is not None:
            queue_units.append(core_total)
    return {q: u for q, u in units.items() if u}


def _split_core(job: Job, pods: Sequence[Pod]) -> tuple[list[Pod], list[Pod]]:
    """Per leaf subgroup: the first ``minMember`` victims are the core, the rest elastic."""
    by_leaf: dict[str, list[Pod]] = {}
    for pod in pods:
        leaf = pod.subgroup if (pod.subgroup and job.subgroups) else ""
        by_leaf.setdefault(leaf, []).append(pod)
    core: list[Pod] = []
    elastic: list[Pod] = []
    for leaf, leaf_pods in by_leaf.items():
        if leaf and leaf in job.subgroups:
            minimum = job.subgroups[leaf].min_member or 0
        else:
            minimum = job.min_member
        if minimum >= len(leaf_pods):
            core.extend(leaf_pods)
        else:
            core.extend(leaf_pods[:minimum])
            elastic.extend(leaf_pods[minimum:])
    return core, elastic
