"""The victim search shared by consolidation, reclaim and preempt.

For one pending job's gang step the solver looks for a set of victims that makes room:

* Victim candidates come from a :class:`~.victim_queue.VictimQueue` one step at a time
  (whole gangs, or single elastic pods), in victim order; each step grows the scenario.
* A scenario that passes the cheap capacity filters is *simulated* on the live state
  inside the open statement: evict the victims, then place the preemptor and re-place the
  victims' jobs in fair order, everything pipelined. Victims that land again are moved
  (Pipelined on their new node), the others are evicted (Releasing). The action's
  validator then accepts or rejects the outcome; a rejected one is rolled back.
* The step's pods are solved for 1, 2, 4, ... of them, each round starting from the
  victims the previous round needed, so a large gang does not search from scratch.

Everything is bounded by counts, never by time: simulations per job, and a memo of
scenarios that already failed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction

from gpushare.model import ACTIVE_ALLOCATED, Job, Pod, PodStatus
from gpushare.model.quantities import MILLI, RESOURCES
from gpushare.scheduler.gang import GangView
from gpushare.scheduler.ordering import job_order_key
from gpushare.scheduler.placement import place_step
from gpushare.scheduler.session import Session
from gpushare.scheduler.state import Statement
from gpushare.scheduler.victims.ordering import pick_fair
from gpushare.scheduler.victims.shares import Quantities, QueueShare
from gpushare.scheduler.victims.victim_queue import VictimQueue, pod_quantities

#: Simulations one job may run before the action gives up on it.
DEFAULT_MAX_SIMULATIONS = 256


@dataclass(slots=True)
class Outcome:
    """What a successful simulation did."""

    preemptor: Job
    placed: list[Pod]
    evicted: list[Pod]  # victims that did not land again
    moved: list[Pod]  # victims placed again (Pipelined on their new node)
    victim_quantities: dict[str, Quantities]  # pod key -> what it held before eviction
    victim_order: list[Pod]  # every victim, in the order the search took them

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


@dataclass(slots=True)
class Search:
    """One action's search: the session, the action's rules, and shared memo/limits."""

    session: Session
    action: str
    reason: str
    candidates: Callable[[Job, list[Pod]], list[tuple[Job, list[Pod]]]]
    validator: Validator
    max_victim_jobs: int | None = None  # consolidation's preemptee cap
    protected_core: Callable[[Job, Job], bool] | None = None
    max_simulations: int = DEFAULT_MAX_SIMULATIONS
    stats: SearchStats = field(default_factory=SearchStats)
    #: The queues' figures when the current job's search began (what the rules read).
    snapshot: dict[str, QueueShare] = field(default_factory=dict)
    _failed: set[tuple[tuple[str, ...], frozenset[str]]] = field(default_factory=set)
    _budget: int = 0

    # ------------------------------------------------------------------ shares
    def shares(self) -> dict[str, QueueShare]:
        """The queues' figures now, frozen for the rules while one job is solved."""
        s = self.session
        out: dict[str, QueueShare] = {}
        for name, queue in s.state.queues.items():
            fair, alloc, alloc_np = s.fair(name), s.allocated(name), s.allocated_np(name)
            out[name] = QueueShare(
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
        return out

    def totals(self) -> dict[str, Fraction]:
        return dict(zip(RESOURCES, self.session.capacity, strict=True))

    # ------------------------------------------------------------------- solve
    def solve(self, stmt: Statement, job: Job, step: list[Pod]) -> Outcome | None:
        """Find victims for ``step`` (the job's next gang step); on success the statement
        holds the evictions and placements, on failure it is as it was."""
        self.stats.jobs += 1
        self._budget = self.max_simulations
        shares = self.snapshot = self.shares()
        totals = self.totals()
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

    def _solve_partial(
        self, stmt: Statement, job: Job, partial: list[Pod], recorded: list[Pod],
        shares: dict[str, QueueShare], totals: dict[str, Fraction],
    ) -> Outcome | None:
        candidates = self.candidates(job, partial)
        protected = None
        if self.protected_core is not None:
            guard = self.protected_core
            protected = lambda victim: guard(job, victim)  # noqa: E731
        queue = VictimQueue(candidates, shares, totals, {p.key for p in recorded}, protected)
        victims = list(recorded)
        victim_jobs = {p.job for p in victims}
        quantities = {p.key: pod_quantities(p) for p in victims}
        partial_keys = tuple(p.key for p in partial)
        while True:
            if victims:
                outcome = self._try(stmt, job, partial, partial_keys, victims, quantities)
                if outcome is not None:
                    return outcome
                if self._budget <= 0:
                    return None
            nxt = queue.pop()
            if nxt is None:
                return None
            victim_job, pods = nxt
            if (
                self.max_victim_jobs is not None
                and victim_job.key not in victim_jobs
                and len(victim_jobs) >= self.max_victim_jobs
            ):
                return None
            victim_jobs.add(victim_job.key)
            for pod in pods:
                quantities[pod.key] = pod_quantities(pod)
            victims.extend(pods)

    def _try(
        self, stmt: Statement, job: Job, partial: list[Pod], partial_keys: tuple[str, ...],
        victims: list[Pod], quantities: dict[str, Quantities],
    ) -> Outcome | None:
        self.stats.scenarios += 1
        fingerprint = (partial_keys, frozenset(p.key for p in victims))
        if fingerprint in self._failed:
            self.stats.deduplicated += 1
            return None
        if not self._may_fit(partial, victims):
            self.stats.filtered += 1
            return None
        self._budget -= 1
        self.stats.simulations += 1
        outcome = self._simulate(stmt, job, partial, victims, quantities)
        if outcome is None:
            self._failed.add(fingerprint)
        return outcome

    # ----------------------------------------------------------------- filters
    def _may_fit(self, partial: list[Pod], victims: list[Pod]) -> bool:
        """Necessary conditions: enough GPU, CPU and memory in total once the victims
        release, and for the largest whole-GPU pod, a node with that many GPUs."""
        state = self.session.state
        need_gpu = need_cpu = need_mem = 0
        max_whole = 0
        big_memory = self.session.max_gpu_memory or 0
        for pod in partial:
            g = pod.gpu
            if g.whole:
                need_gpu += g.whole * MILLI
                max_whole = max(max_whole, g.whole)
            elif g.is_shared:
                need_gpu += min(g.portion_on(big_memory), MILLI) * g.devices
            need_cpu += pod.cpu_millis
            need_mem += pod.memory_bytes
        free_gpu = free_cpu = free_mem = 0
        for usage in state.usage.values():
            if not usage.node.ready:
                continue
            free_gpu += usage.gpus_free_future_milli()
            free_cpu += usage.cpu_free_future()
            free_mem += usage.mem_free_future()
        whole_by_node: dict[str, int] = {}
        for pod in victims:
            if pod.status in ACTIVE_ALLOCATED and pod.status is not PodStatus.PIPELINED:
                held = pod.held()
                free_gpu += held.gpu
                free_cpu += held.cpu
                free_mem += held.mem
                if pod.gpu.whole and pod.node is not None:
                    whole_by_node[pod.node] = whole_by_node.get(pod.node, 0) + pod.gpu.whole
        if need_gpu > free_gpu or need_cpu > free_cpu or need_mem > free_mem:
            return False
        if max_whole:
            best = 0
            for name, usage in state.usage.items():
                if not usage.node.ready:
                    continue
                now, later = usage.whole_gpus_free()
                best = max(best, len(now) + len(later) + whole_by_node.get(name, 0))
            if best < max_whole:
                return False
        return True

    # -------------------------------------------------------------- simulation
    def _simulate(
        self, stmt: Statement, job: Job, partial: list[Pod], victims: list[Pod],
        quantities: dict[str, Quantities],
    ) -> Outcome | None:
        session = self.session
        cp = stmt.checkpoint()
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
        for nxt in self._fair_order(steps):
            step = steps[nxt.key]
            if nxt.key == job.key:
                if not session.check_capacity(job, step).ok:
                    break
                if not place_step(session, stmt, job, step, pipeline_only=True).ok:
                    break
                placed_preemptor = True
            elif step and session.check_capacity(nxt, step).ok:
                place_step(session, stmt, nxt, step, pipeline_only=True)
        if not placed_preemptor:
            stmt.rollback(cp)
            return None
        evicted = [p for p in victims if p.status is not PodStatus.PIPELINED]
        moved = [p for p in victims if p.status is PodStatus.PIPELINED]
        outcome = Outcome(job, list(partial), evicted, moved, dict(quantities), list(victims))
        if not self.validator(outcome):
            stmt.rollback(cp)
            return None
        return outcome

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

    def _fair_order(self, steps: dict[str, list[Pod]]) -> Iterator[Job]:
        """The preemptor and the victim jobs in fair order, re-evaluated after each one
        (each side compared with the step it would place)."""
        session = self.session
        jobs = session.state.jobs
        left = dict(steps)
        totals = self.totals()
        while left:
            by_leaf: dict[str, list[Job]] = {}
            for key in left:
                by_leaf.setdefault(jobs[key].queue, []).append(jobs[key])
            best = {
                leaf: min(candidates, key=lambda j: job_order_key(session, j))
                for leaf, candidates in by_leaf.items()
            }
            requests = {
                leaf: dict(zip(RESOURCES, session.step_request(left[j.key], session.min_gpu_memory),
                               strict=True))
                for leaf, j in best.items()
            }
            leaf = pick_fair(self.shares(), totals, requests)
            if leaf is None:
                return
            chosen = best[leaf]
            del left[chosen.key]
            yield chosen


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
