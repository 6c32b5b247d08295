"""One scheduling cycle's view of the state: fair shares, queue figures, checks and orders.

A :class:`Session` is opened on the live :class:`~gpushare.scheduler.state.ClusterState`
at the start of a cycle. Fair shares are divided once, at opening (as KAI does); queue
allocations are read live from the state, so they follow every placement and eviction
made through statements during the cycle.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from gpushare.model.job import Job
from gpushare.model.pod import Pod
from gpushare.model.quantities import (
    CPU,
    F0,
    GPU,
    MEMORY,
    MIB,
    MILLI,
    RESOURCES,
    Vec,
    as_quantities,
    vadd,
    vec,
)
from gpushare.model.queue import UNLIMITED
from gpushare.scheduler.behaviour import Behaviour
from gpushare.scheduler.config import Config
from gpushare.scheduler.gang import GangView
from gpushare.scheduler.plugins.proportion.resource_division import ShareInput, divide
from gpushare.scheduler.plugins.proportion.resource_share import allocatable
from gpushare.scheduler.state import ClusterState, DivisionMemo

if TYPE_CHECKING:
    from gpushare.scheduler.actions.common.candidates import VictimLists



@dataclass(slots=True)
class CheckResult:
    ok: bool
    reason: str = ""  # OverLimit | NonPreemptibleOverQuota | ...
    message: str = ""


def _fmt(resource: str, amount: Fraction) -> str:
    if resource == GPU:
        return f"{float(amount):.2f}"
    if resource == CPU:
        return f"{float(amount):g}m"
    return f"{float(amount / MIB):g}Mi"


_UNIT = {GPU: " GPU", CPU: " CPU", MEMORY: " memory"}


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
        self.quota: dict[str, Vec] = {}
        self.limit: dict[str, Vec] = {}
        for name, q in state.queues.items():
            self.quota[name] = tuple(q.resources[r].quota for r in RESOURCES)  # type: ignore[assignment]
            self.limit[name] = tuple(q.resources[r].limit for r in RESOURCES)  # type: ignore[assignment]
        self.requested: dict[str, Vec] = {}
        self.fair_share: dict[str, Vec] = self._divide()
        self._gangs: dict[str, GangView] = {}
        self.stale_at_open: set[str] = {
            k for k, job in state.jobs.items() if job.stale_since is not None
        }
        #: The queue order's per-queue figures, made on first use (:mod:`.ordering`).
        self.order_figures: OrderFigures | None = None
        #: The eviction actions' victim lists, made on first use (jobs are neither added
        #: nor removed during a cycle; :mod:`.actions.common.candidates`).
        self.victim_lists: VictimLists | None = None

    # ------------------------------------------------------------ fair share
    def _capacity(self) -> Vec:
        gpu = cpu = mem = 0
        for node in self.state.nodes.values():
            if node.ready:
                gpu += node.gpus
                cpu += node.cpu_millis
                mem += node.memory_bytes
        return (Fraction(gpu), Fraction(cpu), Fraction(mem))

    def pending_request(self, name: str) -> Vec:
        qu = self.state.queue_usage[name]
        gpu = Fraction(qu.pending.gpu, MILLI)
        if qu.pending_gpu_memory_mib and self.min_gpu_memory:
            gpu += Fraction(qu.pending_gpu_memory_mib, self.min_gpu_memory)
        return (gpu, Fraction(qu.pending.cpu), Fraction(qu.pending.mem))

    def _divide(self) -> dict[str, Vec]:
        inputs = []
        for name, q in sorted(self.state.queues.items()):
            request = vadd(vec(self.state.queue_usage[name].allocated), self.pending_request(name))
            self.requested[name] = request
            inputs.append(
                ShareInput(
                    name=name,
                    parent=q.parent,
                    priority=q.priority,
                    created_at=q.created_at,
                    quota={r: q.resources[r].quota for r in RESOURCES},
                    limit={r: q.resources[r].limit for r in RESOURCES},
                    weight={r: q.resources[r].over_quota_weight for r in RESOURCES},
                    request=as_quantities(request) if q.is_leaf() else {},
                    usage={r: Fraction(str(v)) for r, v in q.usage.items()},
                )
            )
        memo_out: DivisionMemo = {}
        shares = divide(
            as_quantities(self.capacity),
            inputs,
            self.config.k_value,
            self.config.fairshare_mode,
            memo=self.state.kept.fair_share_memo,
            memo_out=memo_out,
        )
        self.state.kept.fair_share_memo = memo_out
        return {n: tuple(s[r] for r in RESOURCES) for n, s in shares.items()}  # type: ignore[misc]

    # --------------------------------------------------------- queue figures
    def fair_share_report(self, name: str) -> dict[str, float]:
        g, c, m = self.fair(name)
        return {GPU: float(g), CPU: float(c), MEMORY: float(m / MIB)}

    def deserved_report(self, name: str) -> dict[str, float]:
        """Quota in GPUs, millicores and MiB; -1 unlimited."""
        g, c, m = self.quota[name]
        return {GPU: float(g), CPU: float(c), MEMORY: -1.0 if m == UNLIMITED else float(m / MIB)}

    def allocated(self, name: str) -> Vec:
        return vec(self.state.queue_usage[name].allocated)

    def allocated_np(self, name: str) -> Vec:
        return vec(self.state.queue_usage[name].allocated_np)

    def fair(self, name: str) -> Vec:
        return self.fair_share.get(name, (F0, F0, F0))

    def deserved(self, name: str) -> Vec:
        """Quota per resource; -1 is unlimited."""
        return self.quota[name]

    def allocatable_share(self, name: str) -> Vec:
        """What the queue may hold before it counts as over its share (the rule is
        :func:`~.plugins.proportion.resource_share.allocatable`)."""
        quota, limit, fair = self.quota[name], self.limit[name], self.fair(name)
        return (allocatable(quota[0], limit[0], fair[0]),
                allocatable(quota[1], limit[1], fair[1]),
                allocatable(quota[2], limit[2], fair[2]))

    def drf_share(self, name: str, allocated: Vec) -> Fraction:
        share = F0
        alloc_share = self.allocatable_share(name)
        for i in range(3):
            a = alloc_share[i]
            if a == UNLIMITED:
                a = self.capacity[i]
            value = allocated[i] * 1000 if a == 0 else allocated[i] / a
            share = max(share, value)
        return share

    def over_fair_share(self, name: str) -> bool:
        """KAI's "over": allocated above the fair share in every resource."""
        alloc, fair = self.allocated(name), self.fair(name)
        return all(alloc[i] > fair[i] for i in range(3))

    def within_deserved(self, name: str, extra: Vec) -> bool:
        alloc, quota = self.allocated(name), self.quota[name]
        return all(quota[i] == UNLIMITED or alloc[i] + extra[i] <= quota[i] for i in range(3))

    # ----------------------------------------------------------------- jobs
    def gang(self, job: Job) -> GangView:
        """The job's gang as it stands (cached until any of the job's pods changes)."""
        version = self.state.job_version.get(job.key, 0)
        cached = self._gangs.get(job.key)
        if cached is not None and cached.version == version and cached.job is job:
            return cached
        gang = GangView(job, self.state.job_pods(job), self.behaviour.spare_pods_by_ratio)
        gang.version = version
        self._gangs[job.key] = gang
        return gang

    def pod_request(self, pod: Pod, gpu_memory: int | None) -> Vec:
        """A pending pod's request; memory-sized GPU requests converted with ``gpu_memory``."""
        gpu = pod.gpu.gpus_exact(gpu_memory)
        return (gpu, Fraction(pod.cpu_millis), Fraction(pod.memory_bytes))

    def step_request(self, pods: list[Pod], gpu_memory: int | None) -> Vec:
        total: Vec = (F0, F0, F0)
        for pod in pods:
            total = vadd(total, self.pod_request(pod, gpu_memory))
        return total

    # ---------------------------------------------------------------- checks
    def check_capacity(self, job: Job, pods: list[Pod]) -> CheckResult:
        """Hard checks on the job's leaf queue and every ancestor: OverLimit, and
        NonPreemptibleOverQuota for non-preemptible jobs."""
        request = self.step_request(pods, self.max_gpu_memory)
        for name in self.state.ancestors(job.queue):
            alloc = self.allocated(name)
            limit = self.limit[name]
            for i, r in enumerate(RESOURCES):
                if limit[i] == UNLIMITED or request[i] == 0:
                    continue
                if alloc[i] + request[i] > limit[i]:
                    return CheckResult(
                        False,
                        "OverLimit",
                        f"queue {name}: allocated {_fmt(r, alloc[i])} + request "
                        f"{_fmt(r, request[i])}{_UNIT[r]} > limit {_fmt(r, limit[i])}",
                    )
            if job.preemptible:
                continue
            alloc_np = self.allocated_np(name)
            quota = self.quota[name]
            for i, r in enumerate(RESOURCES):
                if quota[i] == UNLIMITED or request[i] == 0:
                    continue
                if alloc_np[i] + request[i] > quota[i]:
                    return CheckResult(
                        False,
                        "NonPreemptibleOverQuota",
                        f"queue {name}: non-preemptible allocated {_fmt(r, alloc_np[i])} + request "
                        f"{_fmt(r, request[i])}{_UNIT[r]} > quota {_fmt(r, quota[i])}",
                    )
        return CheckResult(True)

    def node_quota_allows(self, pod: Pod, gpu_memory_mib: int) -> bool:
        """KAI's per-node capacity check (``compat: kai``) for a ``gpu-memory`` pod: on a
        node whose GPUs have ``gpu_memory_mib`` each, the request counts as its fraction of
        that GPU (rounded up to two decimals, one device as KAI counts it), checked against
        every ancestor's limit, and for a non-preemptible job against non-preemptible
        allocated plus that fraction within quota. On small GPUs the fraction is larger than
        the cluster-wide check (largest GPU) assumed."""
        if not pod.gpu.is_memory or not gpu_memory_mib:
            return True
        job = self.state.jobs.get(pod.job)
        if job is None:
            return True
        hundredths = -(-pod.gpu.memory_mib * 100 // gpu_memory_mib)
        gpu = Fraction(hundredths, 100)
        for name in self.state.ancestors(job.queue):
            limit = self.limit[name][0]
            if limit != UNLIMITED and self.allocated(name)[0] + gpu > limit:
                return False
            if not job.preemptible:
                quota = self.quota[name][0]
                if quota != UNLIMITED and self.allocated_np(name)[0] + gpu > quota:
                    return False
        return True

    # -------------------------------------------------------------- reasons
    def set_reason(self, job: Job, reason: str) -> None:
        self.pending_reasons[job.key] = reason

    def clear_reason(self, job: Job) -> None:
        self.pending_reasons.pop(job.key, None)


class OrderFigures:
    """Per-cycle constants for fast queue ordering, in the state's integer units
    (milli-GPUs, millicores, bytes)."""

    __slots__ = ("alloc_share", "alloc_zero", "fair_floor", "quota")

    def __init__(self, session: Session) -> None:
        cap = session.capacity
        cap_units = (float(cap[0] * MILLI), float(cap[1]), float(cap[2]))
        scale = (MILLI, 1, 1)
        self.fair_floor: dict[str, tuple[int, int, int]] = {}
        self.quota: dict[str, tuple[Fraction | None, ...]] = {}
        self.alloc_share: dict[str, tuple[float, float, float]] = {}
        self.alloc_zero: dict[str, tuple[bool, bool, bool]] = {}
        # The figures depend only on fair share, quota, limit and capacity, which rarely
        # change between cycles: reuse last cycle's where they are the same.
        state = session.state
        previous = state.kept.order_figures_memo
        memo: dict[Any, Any] = {}
        for name in state.queues:
            key = (session.fair(name), session.quota[name], session.limit[name], cap)
            hit = previous.get(key)
            if hit is not None:
                (self.fair_floor[name], self.quota[name], self.alloc_share[name],
                 self.alloc_zero[name]) = hit
                memo[key] = hit
                continue
            fair = session.fair(name)
            self.fair_floor[name] = tuple(  # type: ignore[assignment]
                (fair[i] * scale[i]).__floor__() for i in range(3)
            )
            quota = session.quota[name]
            self.quota[name] = tuple(
                None if quota[i] == UNLIMITED else quota[i] * scale[i] for i in range(3)
            )
            share = session.allocatable_share(name)
            units = tuple(
                cap_units[i] if share[i] == UNLIMITED else float(share[i] * scale[i])
                for i in range(3)
            )
            self.alloc_zero[name] = tuple(u == 0 for u in units)  # type: ignore[assignment]
            self.alloc_share[name] = units  # type: ignore[assignment]
            memo[key] = (self.fair_floor[name], self.quota[name], self.alloc_share[name],
                         self.alloc_zero[name])
        state.kept.order_figures_memo = memo
