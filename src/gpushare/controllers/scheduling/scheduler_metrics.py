"""The scheduler's Prometheus figures: queues, cycles, decisions, pending reasons.

Names follow KAI Scheduler's where the meaning is the same (``queue_deserved_gpus``,
``queue_allocated_gpus``, ``queue_fair_share_gpu``, ``e2e_scheduling_latency_milliseconds``,
``action_scheduling_latency_milliseconds``, ``task_bind_latency_milliseconds``, ...); the
figures KAI does not have are ``gpushare_``-prefixed. Every update is for what changed: a
queue's gauges are set when its figures or its spec change, decisions are counted as the
loop acts on them (an eviction once, when it is issued), pending jobs are counted up and
down as their reasons change.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gpushare.model.quantities import CPU, GPU, MEMORY
from gpushare.model.queue import Queue
from gpushare.scheduler.decisions import CycleResult, QueueReport

MIB = 1024 * 1024
MS_BUCKETS = tuple(5.0 * 2**i for i in range(10))  # KAI's: 5 ms .. 2560 ms
SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0, 30.0)
_CODE = re.compile(r"^([A-Z][A-Za-z]+):")


def reason_code(text: str) -> str:
    """A short, bounded label for a pending reason (the text itself has numbers and names).

    The core prefixes queue-rule refusals with a code (``OverLimit: ...``); the others are
    recognised by their wording."""
    m = _CODE.match(text)
    if m:
        return m.group(1)
    if text.startswith("cannot be scheduled:"):
        return "InvalidObject"
    if "is not a leaf queue" in text:
        return "NotLeafQueue"
    if "are required for gang scheduling" in text and text.startswith("job has"):
        return "GangIncomplete"
    if "required for gang scheduling" in text:
        return "GangUnschedulable"
    if text.startswith("Resources were not found"):
        return "Unschedulable"
    return "Other"


def _cores(millis: float) -> float:
    return millis / 1000.0 if math.isfinite(millis) and millis >= 0 else -1.0


def _bytes_from_mib(mib: float) -> float:
    return mib * MIB if math.isfinite(mib) and mib >= 0 else -1.0


def _spec_value(value: float) -> float:
    return -1.0 if value < 0 else value


class SchedulerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        q = ("queue_name",)
        # -- per queue (KAI's names) --
        self.queue_info = Gauge("queue_info", "Queue existence marker (1 per queue)",
                                ("queue_name", "parent_queue"), registry=r)
        self.deserved_gpus = Gauge("queue_deserved_gpus", "GPU quota of the queue", q,
                                   registry=r)
        self.quota_cpu = Gauge("queue_quota_cpu_cores", "CPU quota of the queue in cores "
                               "(-1: unlimited)", q, registry=r)
        self.quota_memory = Gauge("queue_quota_memory_bytes", "Memory quota of the queue in "
                                  "bytes (-1: unlimited)", q, registry=r)
        self.allocated_gpus = Gauge("queue_allocated_gpus", "GPUs allocated to the queue's "
                                    "pods", q, registry=r)
        self.allocated_cpu = Gauge("queue_allocated_cpu_cores", "CPU allocated to the queue's "
                                   "pods in cores", q, registry=r)
        self.allocated_memory = Gauge("queue_allocated_memory_bytes", "Memory allocated to the "
                                      "queue's pods in bytes", q, registry=r)
        self.fair_gpu = Gauge("queue_fair_share_gpu", "GPU fair share of the queue (this "
                              "cycle's division)", q, registry=r)
        self.fair_cpu = Gauge("queue_fair_share_cpu_cores", "CPU fair share in cores", q,
                              registry=r)
        self.fair_memory = Gauge("queue_fair_share_memory_gb", "Memory fair share in GB", q,
                                 registry=r)
        # -- per queue (gpushare's own) --
        res = ("queue_name", "resource")
        self.limit = Gauge("gpushare_queue_limit", "Limit of the queue (gpu: GPUs, cpu: "
                           "cores, memory: bytes; -1 unlimited)", res, registry=r)
        self.weight = Gauge("gpushare_queue_over_quota_weight", "Over-quota weight", res,
                            registry=r)
        self.allocated_np = Gauge("gpushare_queue_allocated_non_preemptible",
                                  "Allocated to non-preemptible pods (gpu: GPUs, cpu: cores, "
                                  "memory: bytes)", res, registry=r)
        self.requested = Gauge("gpushare_queue_requested", "Allocated plus requested by pending "
                               "pods (gpu: GPUs, cpu: cores, memory: bytes)", res, registry=r)
        # -- cycles --
        self.e2e_ms = Gauge("e2e_scheduling_latency_milliseconds", "Latency of the last "
                            "scheduling cycle in milliseconds", registry=r)
        self.action_ms = Gauge("action_scheduling_latency_milliseconds", "Latency of each "
                               "action in the last cycle in milliseconds", ("action",),
                               registry=r)
        self.cycle_seconds = Histogram("gpushare_scheduler_cycle_duration_seconds",
                                       "Scheduling cycle latency (deltas applied, actions run, "
                                       "decisions issued)", registry=r, buckets=SECONDS_BUCKETS)
        self.action_seconds = Histogram("gpushare_scheduler_action_duration_seconds",
                                        "Latency of each action per cycle", ("action",),
                                        registry=r, buckets=SECONDS_BUCKETS)
        self.bind_ms = Histogram("task_bind_latency_milliseconds", "Bind request latency in "
                                 "milliseconds", registry=r, buckets=MS_BUCKETS)
        self.cycles = Counter("gpushare_scheduler_cycles", "Scheduling cycles run", ("kind",),
                              registry=r)
        # -- decisions --
        self.decisions = Counter("gpushare_scheduler_decisions", "Decisions by the action "
                                 "that made them and their result (bound, pipelined, evicted)",
                                 ("action", "result"), registry=r)
        self.bind_failures = Counter("gpushare_scheduler_bind_failures", "Bind requests that "
                                     "failed", registry=r)
        self.pending = Gauge("gpushare_scheduler_pending_jobs", "Jobs (pod groups) waiting, by "
                             "queue and the scheduler's reason", ("queue_name", "reason"),
                             registry=r)
        self._reports: dict[str, QueueReport] = {}
        self._specs: dict[str, tuple] = {}
        self._pending: dict[str, tuple[str, str]] = {}  # subject -> (queue, reason code)

    # -- queues ---------------------------------------------------------------------------

    def queue_spec(self, name: str, queue: Queue | None) -> None:
        """A queue's spec changed (``None``: deleted)."""
        old = self._specs.pop(name, None)
        if queue is None:
            if old is not None:
                self._forget_queue(name, old[0])
            return
        if old is not None and old[0] != (queue.parent or ""):
            self.queue_info.remove(name, old[0])
        gpu, cpu, mem = queue.gpu, queue.cpu, queue.memory
        spec = (queue.parent or "", gpu.quota, gpu.limit, cpu.quota, cpu.limit, mem.quota,
                mem.limit, gpu.over_quota_weight, cpu.over_quota_weight, mem.over_quota_weight)
        self._specs[name] = spec
        if spec == old:
            return
        self.queue_info.labels(name, queue.parent or "").set(1)
        self.deserved_gpus.labels(name).set(_spec_value(float(gpu.quota)))
        self.quota_cpu.labels(name).set(_cores(float(cpu.quota)))
        self.quota_memory.labels(name).set(_spec_value(float(mem.quota)))
        self.limit.labels(name, GPU).set(_spec_value(float(gpu.limit)))
        self.limit.labels(name, CPU).set(_cores(float(cpu.limit)))
        self.limit.labels(name, MEMORY).set(_spec_value(float(mem.limit)))
        for resource, spec_of in ((GPU, gpu), (CPU, cpu), (MEMORY, mem)):
            self.weight.labels(name, resource).set(float(spec_of.over_quota_weight))

    def _forget_queue(self, name: str, parent: str) -> None:
        for gauge in (self.deserved_gpus, self.quota_cpu, self.quota_memory,
                      self.allocated_gpus, self.allocated_cpu, self.allocated_memory,
                      self.fair_gpu, self.fair_cpu, self.fair_memory):
            with contextlib.suppress(KeyError):
                gauge.remove(name)
        for gauge in (self.limit, self.weight, self.allocated_np, self.requested):
            for resource in (GPU, CPU, MEMORY):
                with contextlib.suppress(KeyError):
                    gauge.remove(name, resource)
        with contextlib.suppress(KeyError):
            self.queue_info.remove(name, parent)
        self._reports.pop(name, None)

    def queue_reports(self, reports: Mapping[str, QueueReport], changed: Iterable[str]) -> None:
        """Set the figures of the queues in ``changed`` from this cycle's reports."""
        for name in changed:
            report = reports.get(name)
            if report is None:
                continue
            if self._reports.get(name) == report:
                continue
            self._reports[name] = report
            a, f = report.allocated, report.fair_share
            self.allocated_gpus.labels(name).set(a[GPU])
            self.allocated_cpu.labels(name).set(_cores(a[CPU]))
            self.allocated_memory.labels(name).set(_bytes_from_mib(a[MEMORY]))
            self.fair_gpu.labels(name).set(f[GPU] if math.isfinite(f[GPU]) else -1.0)
            self.fair_cpu.labels(name).set(_cores(f[CPU]))
            self.fair_memory.labels(name).set(
                f[MEMORY] * MIB / 1e9 if math.isfinite(f[MEMORY]) else -1.0)
            np_, req = report.allocated_non_preemptible, report.requested
            self.allocated_np.labels(name, GPU).set(np_[GPU])
            self.allocated_np.labels(name, CPU).set(_cores(np_[CPU]))
            self.allocated_np.labels(name, MEMORY).set(_bytes_from_mib(np_[MEMORY]))
            self.requested.labels(name, GPU).set(req[GPU] if math.isfinite(req[GPU]) else -1.0)
            self.requested.labels(name, CPU).set(_cores(req[CPU]))
            self.requested.labels(name, MEMORY).set(_bytes_from_mib(req[MEMORY]))

    # -- cycles and decisions -------------------------------------------------------------

    def cycle(self, seconds: float, actions: Mapping[str, float], full: bool) -> None:
        self.cycles.labels("full" if full else "changes").inc()
        self.cycle_seconds.observe(seconds)
        self.e2e_ms.set(seconds * 1000.0)
        for action, took in actions.items():
            self.action_seconds.labels(action).observe(took)
            self.action_ms.labels(action).set(took * 1000.0)

    def decided(self, result: CycleResult, placed_by: Mapping[str, str]) -> None:
        """Count what a cycle decided; ``placed_by`` names the action that placed a pod."""
        for bind in result.binds:
            self.decisions.labels(placed_by.get(bind.pod, "allocate"), "bound").inc()
        for pipe in result.pipelines:
            self.decisions.labels(placed_by.get(pipe.pod, "allocate"), "pipelined").inc()
        for evict in result.evictions:
            self.decisions.labels(evict.action or "unknown", "evicted").inc()

    def bind(self, seconds: float, ok: bool) -> None:
        self.bind_ms.observe(seconds * 1000.0)
        if not ok:
            self.bind_failures.inc()

    # -- pending reasons ------------------------------------------------------------------

    def pending_set(self, subject: str, queue: str, reason: str) -> None:
        """``subject`` (a job) waits for ``reason``: counted under its code, once."""
        new = (queue, reason_code(reason))
        old = self._pending.get(subject)
        if old == new:
            return
        if old is not None:
            self.pending.labels(*old).dec()
        self._pending[subject] = new
        self.pending.labels(*new).inc()

    def pending_clear(self, subject: str) -> None:
        old = self._pending.pop(subject, None)
        if old is not None:
            self.pending.labels(*old).dec()
