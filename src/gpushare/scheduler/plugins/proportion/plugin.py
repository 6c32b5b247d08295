"""KAI's ``proportion`` plugin: every share rule of a cycle behind one object.

The session opens one :class:`Proportion` at the start of a cycle (as KAI's plugin does at
``OnSessionOpen``) and hands it to the actions as ``session.proportion``. It owns:

* the queues' figures: quota and limit (one form: a vector ``(GPUs, millicores, bytes)``
  of ``Fraction``\\ s per queue, ``UNLIMITED`` for none), the fair share divided once at
  opening (:mod:`.resource_division`), what each queue requested, and its allocations
  (read live from the state, so they follow every statement of the cycle);
* the queue order's share figures (allocatable share, dominant-resource share, "over fair
  share", "within deserved");
* the capacity policy (KAI's ``capacity_policy``): ``OverLimit`` and
  ``NonPreemptibleOverQuota`` on a job's queue and every ancestor, and the per-node check
  of ``gpu-memory`` pods;
* the reclaim rules (KAI's ``CanReclaimResources`` and the reclaim scenario validator):
  :meth:`Proportion.reclaim_rules` gives the action the object it asks (:mod:`.reclaim_rules`).

The actions orchestrate (which jobs, which victims, in which order); whether a queue may
hold, take or lose resources is decided here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

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
from gpushare.scheduler.config import Config
from gpushare.scheduler.plugins.proportion.gpu_types import GpuTypes
from gpushare.scheduler.plugins.proportion.lending import Kept, LendingLimits, kept_of
from gpushare.scheduler.plugins.proportion.reclaim_rules import ReclaimRules
from gpushare.scheduler.plugins.proportion.resource_division import ShareInput, divide
from gpushare.scheduler.plugins.proportion.resource_share import allocatable
from gpushare.scheduler.plugins.proportion.steady import SteadyShares
from gpushare.scheduler.semi import core_part
from gpushare.scheduler.state import ClusterState, DivisionMemo


def step_request(pods: Iterable[Pod], gpu_memory: int | None) -> Vec:
    """What pending pods ask for; memory-sized GPU requests converted with ``gpu_memory``
    (MiB per GPU)."""
    gpu, cpu, mem = F0, F0, F0
    for pod in pods:
        gpu += pod.gpu.gpus_exact(gpu_memory)
        cpu += pod.cpu_millis
        mem += pod.memory_bytes
    return (gpu, cpu, mem)


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


class Proportion:
    """The share rules of one cycle (see the module's description)."""

    def __init__(self, state: ClusterState, config: Config, capacity: Vec,
                 gpu_memory_range: tuple[int | None, int | None],
                 kai_figures: bool = False) -> None:
        self.state = state
        self.config = config
        self.capacity = capacity
        #: The smallest and largest GPU memory of the cluster's nodes (MiB): a
        #: ``gpu-memory`` request counts as its fraction of the smallest GPU in the
        #: division and reclaim, of the largest in the capacity checks.
        self.min_gpu_memory, self.max_gpu_memory = gpu_memory_range
        #: KAI's figures in the capacity checks (exact fraction of the largest GPU for the
        #: step, ceiling hundredths of one device per node); otherwise what the pod would
        #: be charged: its two-decimal portion of the GPU, on every device
        #: (``Behaviour.kai_quota_figures``).
        self.kai_figures = kai_figures
        #: Per queue: quota and limit, the one form every rule reads.
        self.quota: dict[str, Vec] = {}
        self.limit: dict[str, Vec] = {}
        kept: dict[str, Kept] = {}
        for name, q in state.queues.items():
            self.quota[name] = (q.gpu.quota, q.cpu.quota, q.memory.quota)
            self.limit[name] = (q.gpu.limit, q.cpu.limit, q.memory.limit)
            if not config.kai:
                k = kept_of(q)
                if k is not None:
                    kept[name] = k
        #: The queues' lending limits (:mod:`.lending`); None when no queue has one, and
        #: always under ``compat: kai`` (KAI has none; the loaders refuse them there).
        self.lending = LendingLimits(
            state.queues, kept, self.allocated,
            lambda name: state.queue_usage[name].version) if kept else None
        self.requested: dict[str, Vec] = {}
        self.fair_share: dict[str, Vec] = self._divide()
        #: Quota, limit and fair share per GPU type (:mod:`.gpu_types`); None when no queue
        #: has a type entry, and always under ``compat: kai``.
        self.gpu_types = GpuTypes.of(state, config, self.min_gpu_memory)
        #: Per leaf: whether the leaf or an ancestor has a limit, and a quota, in any
        #: resource (queues do not change within a cycle).
        self._bounded: dict[str, tuple[bool, bool]] = {}

    def _bounds(self, leaf: str) -> tuple[bool, bool]:
        bounds = self._bounded.get(leaf)
        if bounds is None:
            chain = self.state.ancestors(leaf)
            bounds = self._bounded[leaf] = (
                any(x != UNLIMITED for name in chain for x in self.limit[name]),
                any(x != UNLIMITED for name in chain for x in self.quota[name]),
            )
        return bounds

    # ------------------------------------------------------------ fair share
    def pending_request(self, name: str) -> Vec:
        qu = self.state.queue_usage[name]
        gpu = Fraction(qu.pending.gpu, MILLI)
        if qu.pending_gpu_memory_mib and self.min_gpu_memory:
            gpu += Fraction(qu.pending_gpu_memory_mib, self.min_gpu_memory)
        return (gpu, Fraction(qu.pending.cpu), Fraction(qu.pending.mem))

    def _divide(self) -> dict[str, Vec]:
        inputs = []
        kept, made = self.state.kept.share_inputs, {}
        for name, q in sorted(self.state.queues.items()):
            # Made again only when what it is made from changed (the queue is replaced
            # on any change to it; its usage figures are compared as numbers).
            qu = self.state.queue_usage[name]
            a, p = qu.allocated, qu.pending
            source = (q, q.is_leaf(), tuple(q.usage.items()), a.gpu, a.cpu, a.mem, p.gpu,
                      p.cpu, p.mem, qu.pending_gpu_memory_mib, self.min_gpu_memory)
            hit = kept.get(name)
            if hit is not None and hit[0] == source:
                made[name] = hit
                self.requested[name] = hit[2]
                inputs.append(hit[1])
                continue
            request = vadd(vec(qu.allocated), self.pending_request(name))
            self.requested[name] = request
            inputs.append(
                ShareInput(
                    name=name,
                    parent=q.parent,
                    priority=q.priority,
                    created_at=q.created_at,
                    quota=as_quantities(self.quota[name]),
                    limit=as_quantities(self.limit[name]),
                    weight={r: q.resources[r].over_quota_weight for r in RESOURCES},
                    request=as_quantities(request) if q.is_leaf() else {},
                    usage={r: Fraction(str(v)) for r, v in q.usage.items()},
                    kept=self.kept_quota(name),
                )
            )
            made[name] = (source, inputs[-1], request)
        self.state.kept.share_inputs = made
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
        return {n: (s[GPU], s[CPU], s[MEMORY]) for n, s in shares.items()}

    def kept_quota(self, name: str) -> dict[str, Fraction] | None:
        """The division's view of a queue's lending limits (None: none, or ``compat:
        kai``)."""
        if self.lending is None or name not in self.lending.kept:
            return None
        return self.state.queues[name].kept_quota()

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

    def allocatable_share(self, name: str) -> Vec:
        """What the queue may hold before it counts as over its share (the rule is
        :func:`~.resource_share.allocatable`)."""
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

    # ------------------------------------------------------- capacity policy
    def check_capacity(self, job: Job, pods: Iterable[Pod]) -> CheckResult:
        """Hard checks of a job's step on the job's leaf queue and every ancestor:
        OverLimit, and NonPreemptibleOverQuota for what of it is non-preemptible (all
        of a non-preemptible job's step, the core part of a semi-preemptible one's)."""
        pods = list(pods)
        bound = self._non_preemptible_part(job, pods)
        limited, quota_bound = self._bounds(job.queue)
        if self.gpu_types is not None:
            typed = self.gpu_types.step_refusal(job, pods, self.max_gpu_memory)
            if typed is not None:
                reason, _, message = typed.partition(": ")
                return CheckResult(False, reason, message)
        if self.lending is not None:
            lent = self._check_lending(job.queue, self._checked_request(pods))
            if lent is not None:
                return lent
        if not limited and (not bound or not quota_bound):
            return CheckResult(True)  # no bound on the chain that the checks below read
        request = self._checked_request(pods)
        np_request = request if bound is pods else self._checked_request(bound)
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
            if not bound:
                continue
            alloc_np = self.allocated_np(name)
            quota = self.quota[name]
            for i, r in enumerate(RESOURCES):
                if quota[i] == UNLIMITED or np_request[i] == 0:
                    continue
                if alloc_np[i] + np_request[i] > quota[i]:
                    return CheckResult(
                        False,
                        "NonPreemptibleOverQuota",
                        f"queue {name}: non-preemptible allocated {_fmt(r, alloc_np[i])} + "
                        f"request {_fmt(r, np_request[i])}{_UNIT[r]} > quota "
                        f"{_fmt(r, quota[i])}",
                    )
        return CheckResult(True)

    def _check_lending(self, leaf: str, request: Vec) -> CheckResult | None:
        """``LendingLimit``: a step may not use what other queues keep idle."""
        assert self.lending is not None
        refused = self.lending.refusal(self.state.ancestors(leaf), self.capacity, request)
        if refused is None:
            return None
        i, left, withheld = refused
        r = RESOURCES[i]
        return CheckResult(
            False,
            "LendingLimit",
            f"queue {leaf}: request {_fmt(r, request[i])}{_UNIT[r]} > "
            f"{_fmt(r, max(left, F0))} free beyond what other queues keep idle "
            f"({_fmt(r, withheld)} of their unused quota, by their lending limits)",
        )

    def non_preemptible_within_quota(self, job: Job, pods: Iterable[Pod]) -> bool:
        """A job never takes more than its queues' quota as non-preemptible use (the
        second half of :meth:`check_capacity`, alone)."""
        pods = list(pods)
        bound = self._non_preemptible_part(job, pods)
        if not bound or not self._bounds(job.queue)[1]:
            return True
        request = self._checked_request(bound)
        for name in self.state.ancestors(job.queue):
            quota, alloc_np = self.quota[name], self.allocated_np(name)
            for i in range(len(RESOURCES)):
                if quota[i] == UNLIMITED or request[i] == 0:
                    continue
                if alloc_np[i] + request[i] > quota[i]:
                    return False
        return True

    def _non_preemptible_part(self, job: Job, pods: list[Pod]) -> list[Pod]:
        """The pods of a step that would be non-preemptible once placed."""
        if not job.preemptible:
            return pods
        if job.semi_preemptible:
            return core_part(job, self.state.job_pods(job), pods)
        return []

    def _checked_request(self, pods: Iterable[Pod]) -> Vec:
        """A step's request as the capacity checks count it before nodes are chosen: a
        ``gpu-memory`` request as its fraction of the largest GPU, the least it can be
        charged (by default the portion it would be charged there, two decimals on each
        device; KAI's exact fraction under ``compat: kai``)."""
        pods = list(pods)
        big = self.max_gpu_memory
        if self.kai_figures or not big or not any(p.gpu.is_memory for p in pods):
            return step_request(pods, big)
        gpu, cpu, mem = step_request([p for p in pods if not p.gpu.is_memory], big)
        for pod in pods:
            if pod.gpu.is_memory:
                gpu += Fraction(pod.gpu.portion_on(big) * pod.gpu.devices, MILLI)
                cpu += pod.cpu_millis
                mem += pod.memory_bytes
        return (gpu, cpu, mem)

    def node_quota_allows(self, pod: Pod, gpu_memory_mib: int) -> bool:
        """The per-node capacity check of a ``gpu-memory`` pod: on a node whose GPUs have
        ``gpu_memory_mib`` each, the request counts as what it would be charged there, its
        two-decimal portion of that GPU on each device, checked against every ancestor's
        limit, and for a non-preemptible job against non-preemptible allocated plus that
        within quota, and against other queues' lending limits (:mod:`.lending`). ``compat:
        kai`` counts it as KAI's predicate does
        (``IsTaskAllocationOnNodeOverCapacity``): rounded up to two decimals, one device.
        On small GPUs the fraction is larger than the step's check (largest GPU) assumed."""
        if not pod.gpu.is_memory or not gpu_memory_mib:
            return True
        job = self.state.jobs.get(pod.job)
        if job is None:
            return True
        if self.kai_figures:
            gpu = Fraction(-(-pod.gpu.memory_mib * 100 // gpu_memory_mib), 100)
        else:
            gpu = Fraction(pod.gpu.portion_on(gpu_memory_mib) * pod.gpu.devices, MILLI)
        for name in self.state.ancestors(job.queue):
            limit = self.limit[name][0]
            if limit != UNLIMITED and self.allocated(name)[0] + gpu > limit:
                return False
            if not job.preemptible:
                quota = self.quota[name][0]
                if quota != UNLIMITED and self.allocated_np(name)[0] + gpu > quota:
                    return False
        if self.lending is not None:
            return self._check_lending(job.queue, (gpu, F0, F0)) is None
        return True

    def node_type_refusal(self, pod: Pod, node: str, gpu_memory_mib: int) -> str | None:
        """The per-node check of the per-type limits and quotas (:mod:`.gpu_types`): why
        the pod may not go to this node (None: it may, or no queue has a type entry)."""
        types = self.gpu_types
        if types is None or not pod.gpu.wants_gpu:
            return None
        job = self.state.jobs.get(pod.job)
        return None if job is None else types.node_refusal(job, pod, node, gpu_memory_mib)

    # --------------------------------------------------------------- reclaim
    def reclaim_rules(self, steady: bool, saturation_multiplier: Fraction) -> ReclaimRules:
        """The rules one run of the reclaim action asks: KAI's fair-share rules and, with
        ``steady`` (off under ``compat: kai``), gpushare's steady path (:mod:`.steady`)."""
        shares = None
        if steady:
            shares = SteadyShares.of(
                self.state, self.config, self.capacity, self.quota, self.limit,
                lambda name: self.requested.get(name, self.allocated(name)),
                None if self.lending is None else self.kept_quota)
        return ReclaimRules(shares, saturation_multiplier)
