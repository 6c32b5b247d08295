"""One scheduling cycle's view of the state: config, clock, gangs, reasons and the plugins.

A :class:`Session` is opened on the live :class:`~gpushare.scheduler.state.ClusterState`
at the start of a cycle. It opens the proportion plugin
(:class:`~gpushare.scheduler.plugins.proportion.plugin.Proportion`, ``session.proportion``),
which divides the fair shares once, at opening (as KAI does), and owns every share rule;
queue allocations are read live from the state, so they follow every placement and
eviction made through statements during the cycle.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from gpushare.model.job import Job
from gpushare.model.pod import Pod
from gpushare.model.quantities import MILLI, Vec
from gpushare.model.queue import UNLIMITED
from gpushare.scheduler.behaviour import Behaviour
from gpushare.scheduler.config import Config
from gpushare.scheduler.gang import GangView
from gpushare.scheduler.plugins.proportion.plugin import Proportion, step_request
from gpushare.scheduler.reserved import ReservedNodes
from gpushare.scheduler.state import ClusterState


class Session:
    """State, config and clock of one cycle, with the figures actions need."""

    def __init__(self, state: ClusterState, config: Config, now: float) -> None:
        self.state = state
        self.config = config
        self.behaviour = Behaviour.of(config)
        self.now = now
        self.pending_reasons: dict[str, str] = {}
        #: Per eviction action that ran, what its search did (``CycleResult.searches``).
        self.searches: dict[str, dict[str, int]] = {}
        self.min_gpu_memory, self.max_gpu_memory = state.gpu_memory_range()
        self.capacity: Vec = self._capacity()
        #: Every share rule of the cycle (fair shares divided now, quotas, capacity
        #: checks, the reclaim rules): the proportion plugin.
        self.proportion = Proportion(state, config, self.capacity,
                                     (self.min_gpu_memory, self.max_gpu_memory),
                                     self.behaviour.kai_quota_figures)
        self._gangs: dict[str, GangView] = {}
        # Gangs with pending pods are kept for later cycles while their job is unchanged
        # (the job's version moves with every change to it or its pods).
        kept = state.kept.of(KeptGangs)
        versions = state.job_version
        for key in [k for k, g in kept.items() if g.version != versions.get(k, 0)]:
            del kept[key]
        self._kept_gangs = kept
        self.stale_at_open: set[str] = {
            k for k, job in state.jobs.items() if job.stale_since is not None
        }
        #: The queue order's per-queue figures, made on first use (:mod:`.ordering`).
        self.order_figures: OrderFigures | None = None
        #: What the modules above the session make once per cycle, under a class each
        #: declares (the eviction actions' ``VictimLists``, say): the session knows none
        #: of their types.
        self.made: dict[type, object] = {}
        #: The reserved nodes placement must respect (``reserved.py``); empty unless
        #: ``state.reservations`` holds some.
        self.reserved = ReservedNodes.of(state, now)

    # -------------------------------------------------------------- capacity
    def _capacity(self) -> Vec:
        gpu = cpu = mem = 0
        for node in self.state.nodes.values():
            if node.ready:
                gpu += node.gpus
                cpu += node.cpu_millis
                mem += node.memory_bytes
        return (Fraction(gpu), Fraction(cpu), Fraction(mem))

    # ----------------------------------------------------------------- jobs
    def gang(self, job: Job) -> GangView:
        """The job's gang as it stands (cached until any of the job's pods changes)."""
        version = self.state.job_version.get(job.key, 0)
        if self.held_until(job) is not None:
            return self._held_gang(job, version)
        cached = self._gangs.get(job.key)
        if cached is not None and cached.version == version and cached.job is job:
            return cached
        by_ratio = self.behaviour.spare_pods_by_ratio
        holds = self.behaviour.bind_backoff
        cached = self._kept_gangs.get(job.key)
        if (cached is not None and cached.version == version and cached.job is job
                and cached.by_ratio == by_ratio and cached.holds == holds):
            self._gangs[job.key] = cached
            return cached
        held = self.state.bind_backoff.held if holds else frozenset()
        gang = GangView(job, self.state.job_pods(job), by_ratio, held)
        gang.holds = holds
        gang.version = version
        self._gangs[job.key] = gang
        if gang.pending:
            self._kept_gangs[job.key] = gang
        return gang

    def held_until(self, job: Job) -> float | None:
        """When the job may be placed again, while it may not be now (``Job.not_before``);
        None: it may."""
        until = job.not_before
        return until if until is not None and self.now < until else None

    def _held_gang(self, job: Job, version: int) -> GangView:
        """The gang of a job held back as a whole: every pending pod is held back. Never
        kept for later cycles (the hold ends with the clock, not with a change)."""
        cached = self._gangs.get(job.key)
        if cached is not None and cached.version == version and cached.job is job:
            return cached
        pods = self.state.job_pods(job)
        gang = GangView(job, pods, self.behaviour.spare_pods_by_ratio,
                        frozenset(p.key for p in pods))
        gang.version = version
        self._gangs[job.key] = gang
        return gang

    def step_request(self, pods: list[Pod], gpu_memory: int | None) -> Vec:
        return step_request(pods, gpu_memory)

    # -------------------------------------------------------------- reasons
    def set_reason(self, job: Job, reason: str) -> None:
        self.pending_reasons[job.key] = reason

    def clear_reason(self, job: Job) -> None:
        self.pending_reasons.pop(job.key, None)


class KeptGangs(dict[str, GangView]):
    """Gangs of jobs with pending pods, by job key, kept across cycles
    (``state.kept.of(KeptGangs)``)."""


class OrderFigures:
    """Per-cycle constants for fast queue ordering, in the state's integer units
    (milli-GPUs, millicores, bytes)."""

    __slots__ = ("alloc_exact", "alloc_share", "alloc_zero", "fair_floor", "quota",
                 "quota_floor")

    def __init__(self, session: Session) -> None:
        cap = session.capacity
        cap_units = (float(cap[0] * MILLI), float(cap[1]), float(cap[2]))
        scale = (MILLI, 1, 1)
        self.fair_floor: dict[str, tuple[int, int, int]] = {}
        self.quota: dict[str, tuple[Fraction | None, ...]] = {}
        self.alloc_share: dict[str, tuple[float, float, float]] = {}
        self.alloc_zero: dict[str, tuple[bool, bool, bool]] = {}
        #: The quota floored to whole units (an integer is within a quota exactly when
        #: it is within its floor) and the allocatable share exactly, in units.
        self.quota_floor: dict[str, tuple[int | None, ...]] = {}
        self.alloc_exact: dict[str, tuple[int | Fraction, ...]] = {}
        # The figures depend only on fair share, quota, limit and capacity, which rarely
        # change between cycles: reuse last cycle's where they are the same.
        state = session.state
        shares = session.proportion
        previous = state.kept.order_figures_memo
        memo: dict[Any, Any] = {}
        cap_key = _pairs(cap)
        for name in state.queues:
            # Fractions as (numerator, denominator) pairs: cheaper to hash.
            key = (_pairs(shares.fair(name)), _pairs(shares.quota[name]),
                   _pairs(shares.limit[name]), cap_key)
            hit = previous.get(key)
            if hit is not None:
                (self.fair_floor[name], self.quota[name], self.alloc_share[name],
                 self.alloc_zero[name], self.quota_floor[name], self.alloc_exact[name]) = hit
                memo[key] = hit
                continue
            fair = shares.fair(name)
            self.fair_floor[name] = tuple(  # type: ignore[assignment]
                (fair[i] * scale[i]).__floor__() for i in range(3)
            )
            quota = shares.quota[name]
            self.quota[name] = tuple(
                None if quota[i] == UNLIMITED else quota[i] * scale[i] for i in range(3)
            )
            self.quota_floor[name] = tuple(
                None if q is None else q.__floor__() for q in self.quota[name]
            )
            share = shares.allocatable_share(name)
            exact = tuple(
                _int_if_whole(cap[i] * scale[i] if share[i] == UNLIMITED else share[i] * scale[i])
                for i in range(3)
            )
            units = tuple(
                cap_units[i] if share[i] == UNLIMITED else float(share[i] * scale[i])
                for i in range(3)
            )
            self.alloc_zero[name] = tuple(u == 0 for u in units)  # type: ignore[assignment]
            self.alloc_share[name] = units  # type: ignore[assignment]
            self.alloc_exact[name] = exact
            memo[key] = (self.fair_floor[name], self.quota[name], self.alloc_share[name],
                         self.alloc_zero[name], self.quota_floor[name], exact)
        state.kept.order_figures_memo = memo


def _int_if_whole(x: Fraction) -> int | Fraction:
    return x.numerator if x.denominator == 1 else x


def _pairs(v: Vec) -> tuple[int, ...]:
    return (v[0].numerator, v[0].denominator, v[1].numerator, v[1].denominator,
            v[2].numerator, v[2].denominator)
