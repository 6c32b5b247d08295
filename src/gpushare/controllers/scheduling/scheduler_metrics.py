"""The scheduler's Prometheus figures: queues, cycles, decisions, pending reasons.

Names follow KAI Scheduler's where the meaning is the same, with KAI's default metrics
namespace ``kai_`` in front as KAI exports them (``kai_queue_deserved_gpus``,
``kai_queue_allocated_gpus``, ``kai_queue_fair_share_gpu``,
``kai_e2e_scheduling_latency_milliseconds``, ``kai_open_session_latency_milliseconds``,
``kai_task_scheduling_latency_milliseconds``, ``kai_podgroups_scheduled_by_action``,
``kai_total_preemption_attempts``, ``kai_pod_group_evicted_pods_total``,
``kai_queue_gpu_usage``, ...), so a board made for KAI reads them unchanged; the figures
KAI does not have are ``gpushare_``-prefixed. Counters export no ``_created`` series.
Every update is for what changed: a queue's gauges are set when its figures or its spec
change, decisions are counted as the loop acts on them (an eviction once, when it is
issued), pending jobs are counted up and down as their reasons change.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)

from gpushare.model.quantities import CPU, GPU, MEMORY
from gpushare.model.queue import Queue
from gpushare.scheduler.decisions import CycleResult, QueueReport

# A counter's ``_created`` sample is a timestamp, not a count: scraped through a union of
# pushes it reads as one more gauge per counter. None are made, in any registry.
disable_created_metrics()

KAI = "kai_"  # KAI Scheduler's default ``--metrics-namespace``
MIB = 1024 * 1024
USAGE_WINDOW_SECONDS = 7 * 24 * 3600.0  # KAI's default usage window: a week
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


@dataclass(frozen=True, slots=True)
class PodGroupRef:
    """The labels KAI puts on a pod group's eviction count."""

    namespace: str
    name: str
    uid: str
    nodepool: str


def _group_key(groups: Mapping[str, PodGroupRef], pod: str) -> str:
    ref = groups.get(pod)
    return f"{ref.namespace}/{ref.name}" if ref is not None else pod


class UsageWindow:
    """Each queue's share of the cluster over a sliding window, kept as two exponentially
    decayed integrals (held·dt and capacity·dt, time constant ``window``) so that nothing
    per sample is stored: the share of the recent past weighs most, a week ago little."""

    def __init__(self, window: float) -> None:
        self.window = window
        self._at: float | None = None
        self._held: dict[str, dict[str, float]] = {}
        self._offered: dict[str, float] = {}

    def forget(self, queue: str) -> None:
        self._held.pop(queue, None)

    def tick(self, now: float, held: Mapping[str, Mapping[str, float]],
             capacity: Mapping[str, float]) -> dict[str, dict[str, float]]:
        if self._at is None or now <= self._at:
            self._at = now if self._at is None else self._at
            dt = 0.0
        else:
            dt = now - self._at
            self._at = now
        decay = math.exp(-dt / self.window)
        for res in (GPU, CPU, MEMORY):
            offered = capacity.get(res, 0.0)
            self._offered[res] = self._offered.get(res, 0.0) * decay + offered * dt
        out: dict[str, dict[str, float]] = {}
        for name, figures in held.items():
            mine = self._held.setdefault(name, {})
            shares: dict[str, float] = {}
            for res in (GPU, CPU, MEMORY):
                value = figures.get(res, 0.0)
                value = value if math.isfinite(value) and value > 0 else 0.0
                mine[res] = mine.get(res, 0.0) * decay + value * dt
                offered = self._offered[res]
                shares[res] = mine[res] / offered if offered > 0 else 0.0
            out[name] = shares
        return out


class SchedulerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        self._queue_metrics(r)
        self._cycle_metrics(r)
        self._decision_metrics(r)
        self.usage_window = UsageWindow(USAGE_WINDOW_SECONDS)
        self._reports: dict[str, QueueReport] = {}
        self._specs: dict[str, tuple] = {}
        self._pending: dict[str, tuple[str, str]] = {}  # subject -> (queue, reason code)

    def _queue_metrics(self, r: CollectorRegistry) -> None:
        """Per queue: KAI's names, then gpushare's own."""
        q = ("queue_name",)
        self.queue_info = Gauge(KAI + "queue_info", "Queue existence marker (1 per queue)",
                                ("queue_name", "parent_queue"), registry=r)
        self.deserved_gpus = Gauge(KAI + "queue_deserved_gpus", "GPU quota of the queue", q,
                                   registry=r)
        self.quota_cpu = Gauge(KAI + "queue_quota_cpu_cores", "CPU quota of the queue in cores "
                               "(-1: unlimited)", q, registry=r)
        self.quota_memory = Gauge(KAI + "queue_quota_memory_bytes", "Memory quota of the queue in "
                                  "bytes (-1: unlimited)", q, registry=r)
        self.allocated_gpus = Gauge(KAI + "queue_allocated_gpus",
                                    "GPUs allocated to the queue's pods", q, registry=r)
        self.allocated_cpu = Gauge(KAI + "queue_allocated_cpu_cores",
                                   "CPU allocated to the queue's pods in cores", q, registry=r)
        self.allocated_memory = Gauge(KAI + "queue_allocated_memory_bytes",
                                      "Memory allocated to the queue's pods in bytes", q,
                                      registry=r)
        self.fair_gpu = Gauge(KAI + "queue_fair_share_gpu", "GPU fair share of the queue (this "
                              "cycle's division)", q, registry=r)
        self.fair_cpu = Gauge(KAI + "queue_fair_share_cpu_cores", "CPU fair share in cores", q,
                              registry=r)
        self.fair_memory = Gauge(KAI + "queue_fair_share_memory_gb", "Memory fair share in GB", q,
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
        self.usage = {
            res: Gauge(KAI + f"queue_{name}_usage", f"{label} the queue held over the usage "
                       "window, as a share of the cluster's (0..1)", q, registry=r)
            for res, name, label in ((GPU, "gpu", "GPUs"), (CPU, "cpu", "CPU"),
                                     (MEMORY, "memory", "Memory"))}

    def _cycle_metrics(self, r: CollectorRegistry) -> None:
        """Per scheduling cycle: its latency and its actions'."""
        self.e2e_ms = Gauge(KAI + "e2e_scheduling_latency_milliseconds", "Latency of the last "
                            "scheduling cycle in milliseconds", registry=r)
        self.action_ms = Gauge(KAI + "action_scheduling_latency_milliseconds", "Latency of each "
                               "action in the last cycle in milliseconds", ("action",),
                               registry=r)
        self.cycle_seconds = Histogram("gpushare_scheduler_cycle_duration_seconds",
                                       "Scheduling cycle latency (deltas applied, actions run, "
                                       "decisions issued)", registry=r, buckets=SECONDS_BUCKETS)
        self.action_seconds = Histogram("gpushare_scheduler_action_duration_seconds",
                                        "Latency of each action per cycle", ("action",),
                                        registry=r, buckets=SECONDS_BUCKETS)
        self.bind_ms = Histogram(KAI + "task_bind_latency_milliseconds", "Bind request latency in "
                                 "milliseconds", registry=r, buckets=MS_BUCKETS)
        self.open_ms = Gauge(KAI + "open_session_latency_milliseconds", "Latency of opening "
                             "the last cycle's session (the state's snapshot) in milliseconds",
                             registry=r)
        self.close_ms = Gauge(KAI + "close_session_latency_milliseconds", "Latency of "
                              "closing the last cycle's session (collecting its decisions) in "
                              "milliseconds", registry=r)
        self.task_ms = Histogram(KAI + "task_scheduling_latency_milliseconds", "Time from a "
                                 "pod's creation to its binding in milliseconds", registry=r,
                                 buckets=MS_BUCKETS)
        self.cycles = Counter("gpushare_scheduler_cycles", "Scheduling cycles run", ("kind",),
                              registry=r)

    def _decision_metrics(self, r: CollectorRegistry) -> None:
        """What the cycles decided: binds, evictions, failures, who waits."""
        self.decisions = Counter("gpushare_scheduler_decisions", "Decisions by the action "
                                 "that made them and their result (bound, pipelined, evicted)",
                                 ("action", "result"), registry=r)
        self.scheduled_by_action = Counter(KAI + "podgroups_scheduled_by_action", "Pod "
                                           "groups placed, by the action that placed them",
                                           ("action",), registry=r)
        self.acted_on_by_action = Counter(KAI + "podgroups_acted_on_by_action", "Pod groups "
                                          "an eviction action searched victims for",
                                          ("action",), registry=r)
        self.preemption_attempts = Counter(KAI + "total_preemption_attempts", "Preemptions "
                                           "that found room (KAI counts the preempt action's "
                                           "successes under this name)", registry=r)
        self.evicted_pods = Counter(KAI + "pod_group_evicted_pods", "Pods evicted, per pod "
                                    "group and action", ("podgroup", "namespace", "uid",
                                                         "nodepool", "action"), registry=r)
        self.bind_failures = Counter("gpushare_scheduler_bind_failures", "Bind requests that "
                                     "failed", registry=r)
        self.pending = Gauge("gpushare_scheduler_pending_jobs", "Jobs (pod groups) waiting, by "
                             "queue and the scheduler's reason", ("queue_name", "reason"),
                             registry=r)

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
        for gauge in self.usage.values():
            with contextlib.suppress(KeyError):
                gauge.remove(name)
        with contextlib.suppress(KeyError):
            self.queue_info.remove(name, parent)
        self._reports.pop(name, None)
        self.usage_window.forget(name)

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

    def cycle(self, seconds: float, actions: Mapping[str, float], full: bool,
              session: tuple[float, float] = (0.0, 0.0)) -> None:
        """One cycle's latencies; ``session``: seconds to open and to close its session."""
        self.cycles.labels("full" if full else "changes").inc()
        self.cycle_seconds.observe(seconds)
        self.e2e_ms.set(seconds * 1000.0)
        self.open_ms.set(session[0] * 1000.0)
        self.close_ms.set(session[1] * 1000.0)
        for action, took in actions.items():
            self.action_seconds.labels(action).observe(took)
            self.action_ms.labels(action).set(took * 1000.0)

    def usage_tick(self, now: float, capacity: Mapping[str, float]) -> None:
        """Integrate each queue's allocation (its last report) and the cluster's
        ``capacity`` (natural units) up to ``now`` (a monotonic clock), then set
        ``kai_queue_*_usage``: the queue's share of what the cluster offered over the
        window, the figure KAI's usage database gives its time-aware fair share."""
        held = {name: r.allocated for name, r in self._reports.items()}
        for name, shares in self.usage_window.tick(now, held, capacity).items():
            for res, value in shares.items():
                self.usage[res].labels(name).set(value)

    def decided(self, result: CycleResult, placed_by: Mapping[str, str],
                groups: Mapping[str, PodGroupRef] | None = None) -> None:
        """Count what a cycle decided; ``placed_by`` names the action that placed a pod,
        ``groups`` the pod group of a pod (by pod key)."""
        groups = groups or {}
        scheduled: dict[str, set[str]] = {}
        for bind in result.binds:
            action = placed_by.get(bind.pod, "allocate")
            self.decisions.labels(action, "bound").inc()
            scheduled.setdefault(action, set()).add(_group_key(groups, bind.pod))
        for pipe in result.pipelines:
            action = placed_by.get(pipe.pod, "allocate")
            self.decisions.labels(action, "pipelined").inc()
            scheduled.setdefault(action, set()).add(_group_key(groups, pipe.pod))
        for action, jobs in scheduled.items():
            self.scheduled_by_action.labels(action).inc(len(jobs))
        for action, figures in result.searches.items():
            self.acted_on_by_action.labels(action).inc(figures.get("jobs", 0))
            if action == "preempt":
                self.preemption_attempts.inc(figures.get("succeeded", 0))
        for evict in result.evictions:
            action = evict.action or "unknown"
            self.decisions.labels(action, "evicted").inc()
            ref = groups.get(evict.pod) or PodGroupRef(evict.pod.partition("/")[0], "", "", "")
            self.evicted_pods.labels(ref.name, ref.namespace, ref.uid, ref.nodepool,
                                     action).inc()

    def bind(self, seconds: float, ok: bool, since_created: float | None = None) -> None:
        """A bind request took ``seconds``; a pod bound ``since_created`` seconds after its
        creation (KAI's task scheduling latency)."""
        self.bind_ms.observe(seconds * 1000.0)
        if not ok:
            self.bind_failures.inc()
        elif since_created is not None and since_created >= 0:
            self.task_ms.observe(since_created * 1000.0)

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
