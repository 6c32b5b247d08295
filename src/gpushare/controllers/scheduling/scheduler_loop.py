"""The scheduler loop: watched changes in, scheduling cycles, decisions out as API calls.

Informer callbacks only append deltas to a queue; the loop's thread owns the core's
state. It applies the deltas, runs a cycle when something changed (at most every
``min_interval``; and every ``period`` anyway, for the time-based rules) and turns the
decisions into API calls on a thread pool: Bind → ``pods/<name>/binding`` carrying the
GPU assignment annotations, Evict → delete the pod, Pipeline → an Event, pending reasons
→ ``Unschedulable`` Events and PodGroup conditions.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from gpushare.api.contracts import GPU_RESOURCE, MILLI, QUEUE_LABEL, SCHEDULER_NAMES, GpuBinding
from gpushare.api.kubelet_share import ShareConfigError, share_configmap, unprepared
from gpushare.api.objects import Obj
from gpushare.api.quantity import format_bytes, format_milli
from gpushare.api.timefmt import parse_rfc3339
from gpushare.controllers.events import EventRecorder, now_rfc3339
from gpushare.controllers.scheduling.heap import HeapKeeper
from gpushare.controllers.scheduling.mirror import ORPHAN_QUEUE, Mirror
from gpushare.controllers.scheduling.reservations import ReservationWriter
from gpushare.controllers.scheduling.scheduler_metrics import PodGroupRef, SchedulerMetrics
from gpushare.controllers.scheduling.scheduling_status import (
    mark_unschedulable,
    podgroup_unschedulable,
    reason_for_pod,
    record_scheduled,
)
from gpushare.kube.client import (
    CONFIGMAPS,
    NODES,
    PODGROUPS,
    PODS,
    PRIORITY_CLASSES,
    QUEUES,
    ApiError,
    KubeClient,
    Stopper,
)
from gpushare.kube.informer import WorkQueue, start_workers
from gpushare.kube.informers import InformerFactory
from gpushare.model import PodStatus
from gpushare.model.queue import root_quota_overcommit
from gpushare.scheduler.actions.registry import get_action
from gpushare.scheduler.config import NODE_POOL_LABEL, Config
from gpushare.scheduler.cycle import collect, open_session
from gpushare.scheduler.decisions import CycleResult, QueueReport
from gpushare.scheduler.state import ClusterState

log = logging.getLogger(__name__)

TIMED_ACTIONS = frozenset({"stalegangeviction"})
BUSY_DELTAS = 100  # changes queued at a cycle's start that count as "under load"
SLOW_CYCLE_FACTOR = 2.0  # wait at least this many times the last cycle's duration
PHASE_WORKERS = 4
PHASE_YIELD_SECONDS = 0.05
PHASE_MAX_WAIT_SECONDS = 5.0  # a phase write waits at most this long for binds to drain


# Kinds whose status the scheduler does not read (Queue status and PodGroup status are
# written by this process).
STATUS_BLIND = frozenset({"podgroup", "queue"})


def _spec_and_meta(obj: Obj) -> tuple[Any, ...]:
    meta = obj.get("metadata") or {}
    return (obj.get("spec"), meta.get("labels"), meta.get("annotations"),
            meta.get("ownerReferences"), meta.get("deletionTimestamp"))


def podgroup_phase(min_member: int, statuses: list[PodStatus]) -> str:
    """``Running`` once the gang is placed; ``Succeeded`` / ``Failed`` once every pod has
    finished (any failure: Failed); ``Pending`` otherwise."""
    placed = sum(1 for s in statuses if s in (PodStatus.BINDING, PodStatus.RUNNING,
                                               PodStatus.RELEASING))
    finished = [s for s in statuses if s in (PodStatus.SUCCEEDED, PodStatus.FAILED)]
    if statuses and len(finished) == len(statuses):
        return "Failed" if PodStatus.FAILED in finished else "Succeeded"
    if statuses and placed >= max(min_member, 1):
        return "Running"
    return "Pending"


@dataclass(slots=True)
class LoopStats:
    cycles: int = 0
    binds: int = 0
    bind_failures: int = 0
    evictions: int = 0
    cycle_seconds: float = 0.0  # total time inside run_cycle
    apply_seconds: float = 0.0  # total time applying deltas
    last_cycle_seconds: float = 0.0
    #: Cycles in which an eviction action spent its search budget (work left for later).
    budget_cycles: int = 0


def work_left(result: CycleResult) -> bool:
    """Whether an eviction action spent its search budget with jobs left to search for."""
    return any(figures["budget_ran_out"] for figures in result.searches.values())


@dataclass(slots=True)
class QueueFigures:
    """The latest per-queue figures, in API quantity strings, for Queue status."""

    reports: dict[str, dict[str, dict[str, str]]] = field(default_factory=dict)
    version: int = 0


def resource_list(values: dict[str, float]) -> dict[str, str]:
    """Natural units (GPUs, millicores, MiB) to a KAI-style ResourceList."""
    out: dict[str, str] = {}
    gpu = values.get("gpu", 0.0)
    cpu = values.get("cpu", 0.0)
    mem = values.get("memory", 0.0)
    if math.isfinite(gpu):
        out[GPU_RESOURCE] = format_milli(max(round(gpu * 1000), 0))
    if math.isfinite(cpu):
        out["cpu"] = format_milli(max(round(cpu), 0))
    if math.isfinite(mem):
        out["memory"] = format_bytes(max(round(mem * 1024 * 1024), 0))
    return out


def figures_of(report: QueueReport) -> dict[str, dict[str, str]]:
    return {
        "fairShare": resource_list(report.fair_share),
        "allocated": resource_list(report.allocated),
        "allocatedNonPreemptible": resource_list(report.allocated_non_preemptible),
        "requested": resource_list(report.requested),
    }


PLACED = frozenset({PodStatus.BINDING, PodStatus.PIPELINED})


def _since_created(pod: Obj | None) -> float | None:
    """Seconds from the pod's ``creationTimestamp`` to now (the wall clock)."""
    stamp = ((pod or {}).get("metadata") or {}).get("creationTimestamp")
    if not stamp:
        return None
    try:
        created = parse_rfc3339(str(stamp))
    except ValueError:
        return None
    return time.time() - created


@dataclass(slots=True)
class TimedCycle:
    result: CycleResult
    action_seconds: dict[str, float]
    placed_by: dict[str, str]  # pod key -> the action that placed it this cycle
    session_seconds: tuple[float, float] = (0.0, 0.0)  # opening and closing the session


def timed_cycle(state: ClusterState, config: Config, now: float) -> TimedCycle:
    """The core's cycle (`run_cycle`), action by action, timing each on the shell's clock
    and noting which action placed each pod (for the decision counts)."""
    opened = time.perf_counter()
    session = open_session(state, config, now)
    open_seconds = time.perf_counter() - opened
    took: dict[str, float] = {}
    placed_by: dict[str, str] = {}
    for name in config.actions:
        action = get_action(name)
        started = time.perf_counter()
        action(session)
        took[name] = took.get(name, 0.0) + time.perf_counter() - started
        for key in state.touched():
            if key not in placed_by:
                pod = state.pods.get(key)
                if pod is not None and pod.status in PLACED:
                    placed_by[key] = name
    closing = time.perf_counter()
    result = collect(session)
    return TimedCycle(result, took, placed_by,
                      (open_seconds, time.perf_counter() - closing))


class SchedulerLoop:
    name = "scheduler"

    def __init__(
        self,
        client: KubeClient,
        informers: InformerFactory,
        stopper: Stopper,
        events: EventRecorder,
        *,
        scheduler_names: tuple[str, ...] = SCHEDULER_NAMES,
        config: Config | None = None,
        bind_workers: int = 16,
        min_interval: float = 0.05,
        period: float = 1.0,
        share_configmaps: bool = False,
    ) -> None:
        self.client = client
        # Kubelet nodes: write each fractional pod's share ConfigMap before binding it.
        self.share_configmaps = share_configmaps
        self.stopper = stopper
        self.events = events
        self.config = config or Config()
        # Cycles triggered by changes skip the time-based sweep over every job (stale
        # gangs); the periodic cycle runs every action.
        self.event_config = dataclasses.replace(
            self.config, actions=tuple(a for a in self.config.actions if a not in TIMED_ACTIONS)
        )
        self.min_interval = min_interval
        self.period = period
        self.mirror = Mirror(scheduler_names=scheduler_names, compat_kai=self.config.kai)
        self.stats = LoopStats()
        self.metrics = SchedulerMetrics()
        self._beneficiaries: dict[str, str] = {}
        self._overcommit: str | None = None
        self._queue_changes: set[str] = set()
        self.heap = HeapKeeper()
        self.figures = QueueFigures()
        self.figures_changed = threading.Condition()
        self._deltas: deque[tuple[str, str, Obj]] = deque()
        self._wake = threading.Event()
        self._pool = ThreadPoolExecutor(bind_workers, thread_name_prefix="bind")
        self._reasons: dict[str, str] = {}  # job key -> last reported pending reason
        self._told: dict[str, str] = {}  # pod key -> the pending reason it was told
        self._cleared: set[str] = set()  # PodGroups whose conditions were cleared
        self._binds_in_flight = 0
        self._in_flight_lock = threading.Lock()
        self._phases: dict[str, str] = {}  # PodGroup key -> phase written (or to write)
        self._phase_queue = WorkQueue()
        self.reservations = ReservationWriter(client, events, self._pool.submit)
        self._informers = [
            (informers.get(PRIORITY_CLASSES), "priorityclass"),
            (informers.get(NODES), "node"),
            (informers.get(QUEUES), "queue"),
            (informers.get(PODGROUPS), "podgroup"),
            (informers.get(PODS), "pod"),
        ]
        for informer, kind in self._informers:
            informer.add_handler(self._handler(kind))

    def _handler(self, kind: str):
        def on_change(event: str, obj: Obj, old: Obj | None) -> None:
            if kind in STATUS_BLIND and old is not None and event == "MODIFIED" and (
                _spec_and_meta(obj) == _spec_and_meta(old)
            ):
                return  # a status write (ours, mostly): nothing the scheduler reads
            self._deltas.append((kind, event, obj))
            self._wake.set()

        return on_change

    def start(self) -> list[threading.Thread]:
        thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        thread.start()
        return [thread, *start_workers(self._phase_queue, self._write_phase, self.stopper,
                                       "podgroup-phase", PHASE_WORKERS)]

    # -- the loop -----------------------------------------------------------------------

    def _run(self) -> None:
        for informer, _ in self._informers:
            while not informer.wait_synced(0.5):
                if self.stopper.stopped:
                    return
        last = last_full = 0.0
        busy = False
        while not self.stopper.stopped:
            woke = self._wake.wait(self.period)
            since = time.monotonic() - last
            # Under load, batch more per cycle: a cycle's fixed cost is paid less often;
            # and a slow cycle (a large backlog that does not fit) is not run back to back.
            interval = self.min_interval * 2 if busy else self.min_interval
            interval = min(max(interval, self.stats.last_cycle_seconds * SLOW_CYCLE_FACTOR),
                           self.period)
            if woke and since < interval:
                # Batch what arrives in the next few milliseconds into one cycle.
                self.stopper.wait(interval - since)
            self._wake.clear()
            last = time.monotonic()
            full = last - last_full >= self.period
            if full:
                last_full = last
            busy = len(self._deltas) >= BUSY_DELTAS
            try:
                self.step(time.time(), full=full)
            except Exception:
                log.exception("scheduling cycle failed")
        self._pool.shutdown(wait=False, cancel_futures=True)
        s = self.stats
        log.info(
            "scheduler: %d cycles (%.3fs in cycles, %.3fs applying deltas; %d spent a"
            " victim search budget), %d binds (%d failed), %d evictions", s.cycles,
            s.cycle_seconds, s.apply_seconds, s.budget_cycles, s.binds, s.bind_failures,
            s.evictions,
        )

    def drain(self) -> int:
        """Apply the queued deltas to the state; return how many there were."""
        started = time.perf_counter()
        handlers = {
            "priorityclass": self.mirror.on_priority_class,
            "node": self.mirror.on_node,
            "queue": self.mirror.on_queue,
            "podgroup": self.mirror.on_podgroup,
            "pod": self.mirror.on_pod,
        }
        count = 0
        while self._deltas:
            kind, event, obj = self._deltas.popleft()
            count += 1
            try:
                if kind == "bindfailed":
                    self.mirror.bind_failed(str(obj["key"]))
                elif kind == "evictfailed":
                    self.mirror.evict_failed(str(obj["key"]))
                else:
                    handlers[kind](event, obj)
                    if kind == "queue":
                        self._queue_changes.add(str((obj.get("metadata") or {}).get("name")))
                    if kind == "podgroup" and event == "DELETED":
                        # A PodGroup made again under this name starts with no phase.
                        meta = obj.get("metadata") or {}
                        self._phases.pop(f"{meta.get('namespace')}/{meta.get('name')}", None)
            except Exception:
                log.exception("applying a %s %s failed", kind, event)
        self.stats.apply_seconds += time.perf_counter() - started
        return count

    def step(self, now: float, full: bool = True) -> CycleResult:
        """Apply deltas, run one cycle (every action when ``full``) and act on it."""
        step_started = time.perf_counter()
        self.drain()
        self._queue_specs_changed()
        self._warn_overcommit()
        started = time.perf_counter()
        config = self.config if full else self.event_config
        for held in self.mirror.state.reservations.values():
            if held.job not in self.reservations.written:
                self.reservations.recovered(held)  # read back from its PodGroup
        timed = timed_cycle(self.mirror.state, config, now)
        result = timed.result
        elapsed = time.perf_counter() - started
        self.stats.cycles += 1
        self.stats.cycle_seconds += elapsed
        self.stats.last_cycle_seconds = elapsed
        if work_left(result):
            self.stats.budget_cycles += 1
            self._wake.set()  # the rest of the work in the next cycle, not a period later
        self._beneficiaries = self._placed_for(timed.placed_by)
        self.act(result, now)
        self.metrics.decided(result, timed.placed_by, self._groups_of(result))
        self.metrics.cycle(time.perf_counter() - step_started, timed.action_seconds, full,
                           timed.session_seconds)
        self.metrics.usage_tick(time.monotonic(), self._capacity())
        self.heap.between_cycles()
        return result

    def _warn_overcommit(self) -> None:
        """A Warning Event ``QuotaOvercommitted`` on every top-level Queue while their GPU
        quotas sum to more than the cluster's GPUs (once per change of the figures)."""
        state = self.mirror.state
        roots = {name: float(q.gpu.quota) for name, q in state.queues.items()
                 if not q.parent and name != ORPHAN_QUEUE}
        message = root_quota_overcommit(roots, self._capacity()["gpu"])
        if message == self._overcommit:
            return
        self._overcommit = message
        if message is None:
            return
        for name in sorted(roots):
            raw = self.mirror.raw_queues.get(name)
            if raw is not None and roots[name] > 0:
                self.events.emit(raw, "Warning", "QuotaOvercommitted", message)

    def _groups_of(self, result: CycleResult) -> dict[str, PodGroupRef]:
        """The pod group (namespace, name, uid, node pool) of each pod a decision names."""
        mirror = self.mirror
        out: dict[str, PodGroupRef] = {}
        for pod_key in [*(b.pod for b in result.binds), *(p.pod for p in result.pipelines),
                        *(e.pod for e in result.evictions)]:
            job_key = mirror.pod_group_of(pod_key)
            if job_key is None:
                continue
            namespace, _, name = job_key.partition("/")
            meta = (mirror.raw_podgroups.get(job_key) or {}).get("metadata") or {}
            raw = mirror.raw_pods.get(pod_key) or {}
            selector = (raw.get("spec") or {}).get("nodeSelector") or {}
            out[pod_key] = PodGroupRef(namespace, name, str(meta.get("uid") or ""),
                                       str(selector.get(NODE_POOL_LABEL) or "default"))
        return out

    def _capacity(self) -> dict[str, float]:
        """The ready nodes' capacity in natural units (GPUs, millicores, MiB)."""
        nodes = [n for n in self.mirror.state.nodes.values() if n.ready]
        return {"gpu": float(sum(n.gpus for n in nodes)),
                "cpu": float(sum(n.cpu_millis for n in nodes)),
                "memory": sum(n.memory_bytes for n in nodes) / (1024 * 1024)}

    def _placed_for(self, placed_by: dict[str, str]) -> dict[str, str]:
        """Per eviction action, whom it placed this cycle (``queue vision: default/p``),
        so that an Evict event says who the room was made for."""
        mirror = self.mirror
        by_action: dict[str, dict[str, list[str]]] = {}
        for pod_key, action in placed_by.items():
            if action == "allocate":
                continue
            job_key = mirror.pod_group_of(pod_key)
            job = mirror.state.jobs.get(job_key) if job_key else None
            queue = job.queue if job is not None else "?"
            by_action.setdefault(action, {}).setdefault(queue, []).append(pod_key)
        return {
            action: "; ".join(f"queue {q}: {', '.join(sorted(pods)[:5])}"
                              + (f" and {len(pods) - 5} more" if len(pods) > 5 else "")
                              for q, pods in sorted(queues.items()))
            for action, queues in by_action.items()
        }

    def _queue_specs_changed(self) -> None:
        state = self.mirror.state
        for name in self._queue_changes:
            self.metrics.queue_spec(name, state.queues.get(name))
        self._queue_changes.clear()

    # -- acting on decisions ------------------------------------------------------------

    def act(self, result: CycleResult, now: float) -> None:
        mirror = self.mirror
        for bind in result.binds:
            pod = mirror.state.pods.get(bind.pod)
            if pod is None:
                continue
            mirror.assume(bind.pod, bind.node, tuple(bind.gpu_indices), pod.portion)
            with self._in_flight_lock:
                self._binds_in_flight += 1
            self._pool.submit(self._bind, bind.pod, bind.node, tuple(bind.gpu_indices),
                              bind.portion_milli, bind.gpu_memory_mib, bool(pod.gpu.wants_gpu))
            self.stats.binds += 1
        for pipe in result.pipelines:
            raw = mirror.raw_pods.get(pipe.pod)
            if raw is not None:
                self.events.emit(
                    raw, "Normal", "Pipelined",
                    f"pod will run on node {pipe.node} once the resources being released"
                    " there are free",
                )
            # Nothing is written for a pipelined pod: like any pending pod it is decided
            # afresh in a later cycle, once the victims' deletions have arrived.
            pod = mirror.state.pods.get(pipe.pod)
            if pod is not None and pod.status is PodStatus.PIPELINED:
                mirror.state.set_pod(pod, PodStatus.PENDING)
        for evict in result.evictions:
            raw = mirror.raw_pods.get(evict.pod)
            job_key = mirror.pod_group_of(evict.pod)
            job = None
            if job_key is not None:
                memory = mirror.job_memory.get(job_key)
                if memory is not None:
                    memory.last_eviction_at = now
                job = mirror.state.jobs.get(job_key)
                if job is not None:
                    job.last_eviction_at = now
                    job.pending_since = now  # job aging counts its wait from here
            if raw is not None:
                # who lost it and whom it was for, so the event tells the whole decision
                victim_queue = job.queue if job is not None else "?"
                for_whom = self._beneficiaries.get(evict.action)
                self.events.emit(raw, "Warning", "Evict",
                                 f"evicted by {evict.action}: {evict.reason} (from queue "
                                 f"{victim_queue}" + (f" for {for_whom})" if for_whom else ")"))
            mirror.evicting.add(evict.pod)
            self._pool.submit(self._evict, evict.pod)
            self.stats.evictions += 1
        for job_key, stale in result.stale_since.items():
            memory = mirror.job_memory.get(job_key)
            if memory is not None:
                memory.stale_since = stale
        for bind in result.binds:
            job_key = mirror.pod_group_of(bind.pod)
            if job_key:
                mirror.dirty_jobs.add(job_key)
        self._report_pending(result)
        self.reservations.publish(result.reservations, mirror.raw_podgroups)
        self._publish_queues(result)
        self._publish_phases()

    def _bind(
        self, key: str, node: str, indices: tuple[int, ...], portion_milli: int,
        memory_mib: int, wants_gpu: bool,
    ) -> None:
        namespace, _, name = key.partition("/")
        annotations: dict[str, str] = {}
        if wants_gpu:
            annotations = GpuBinding(indices, portion_milli, memory_mib).annotations()
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        started = time.perf_counter()
        try:
            if self.share_configmaps and wants_gpu:
                self._write_share_configmap(key, node, GpuBinding(indices, portion_milli,
                                                                  memory_mib))
            self.client.create(PODS.item(name, namespace, "binding"), body)
            self.metrics.bind(time.perf_counter() - started, True,
                              _since_created(self.mirror.raw_pods.get(key)))
            record_scheduled(self.events, self.mirror.raw_pods.get(key), node)
            return
        except Exception as error:
            self.metrics.bind(time.perf_counter() - started, False)
            self.stats.bind_failures += 1
            log.warning("bind %s to %s failed: %s", key, node, error)
            failure = error
        finally:
            with self._in_flight_lock:
                self._binds_in_flight -= 1
        # The bind may have happened even though we saw an error (a dropped connection,
        # a server restart). Until the pod itself says, it keeps its GPUs in our state,
        # so nothing else is placed on them.
        truth = self._read_pod(namespace, name)
        if truth is None:
            self._deltas.append(("pod", "DELETED", {"metadata": {"namespace": namespace,
                                                                 "name": name}}))
        else:
            self._deltas.append(("pod", "MODIFIED", truth))
            if not (truth.get("spec") or {}).get("nodeName"):
                self.events.emit(truth, "Warning", "FailedBinding",
                                 f"binding to node {node} failed: {failure}")
                self._deltas.append(("bindfailed", "", {"key": key}))
        self._wake.set()

    def _write_share_configmap(self, key: str, node: str, binding: GpuBinding) -> None:
        """Create (or bring up to date) a fractional pod's share ConfigMap; whole-GPU pods
        have none. An error stops the bind, so no pod runs on a GPU share without its limits."""
        pod = self.mirror.raw_pods.get(key)
        if pod is None or not 0 < binding.portion_milli < MILLI:
            return
        why = unprepared(pod)
        if why is not None:
            raise ShareConfigError(why)
        node_state = self.mirror.state.nodes.get(node)
        gpu_memory = node_state.gpu_memory_mib if node_state is not None else 0
        body = share_configmap(pod, binding, gpu_memory)
        meta = body["metadata"]
        try:
            self.client.create(CONFIGMAPS.collection(meta["namespace"]), body)
        except ApiError as error:
            if not error.conflict:
                raise
            self.client.replace(CONFIGMAPS.item(meta["name"], meta["namespace"]), body)

    def _read_pod(self, namespace: str, name: str) -> Obj | None:
        """GET the pod, retrying while the server cannot be reached."""
        delay = 0.1
        while not self.stopper.stopped:
            try:
                return self.client.get(PODS.item(name, namespace))
            except Exception as error:
                log.debug("reading pod %s/%s: %s", namespace, name, error)
                self.stopper.wait(delay)
                delay = min(delay * 2, 2.0)
        return None

    def _evict(self, key: str) -> None:
        namespace, _, name = key.partition("/")
        try:
            self.client.delete(PODS.item(name, namespace), propagation="Background")
        except Exception as error:
            log.warning("evicting %s failed: %s", key, error)
            self._deltas.append(("evictfailed", "", {"key": key}))
            self._wake.set()

    def _report_pending(self, result: CycleResult) -> None:
        """Events and PodGroup conditions for what waits, written when the reason changes.

        Besides the core's reasons, objects the mirror cannot use say why: a PodGroup
        whose queue does not exist, a pod with a malformed GPU annotation."""
        mirror = self.mirror
        wanted: dict[str, str] = {f"job/{k}": r for k, r in result.pending_reasons.items()}
        for key, why in mirror.invalid.items():
            kind, _, name = key.partition("/")
            if kind in ("podgroup", "pod"):
                wanted[f"{'job' if kind == 'podgroup' else 'pod'}/{name}"] = (
                    f"cannot be scheduled: {why}"
                )
        dirty = mirror.dirty_jobs
        for subject, reason in wanted.items():
            kind, _, key = subject.partition("/")
            changed = self._reasons.get(subject) != reason
            if not changed and not (kind == "job" and key in dirty):
                continue
            self._reasons[subject] = reason
            if changed:
                self.metrics.pending_set(subject, self._queue_of(kind, key), reason)
            if kind == "pod":
                self._tell_pod(key, reason)
                continue
            # Every pending pod says why, also one the job made after the reason was
            # first written (a replacement, a scale-up).
            for pod_key in mirror.pending_pods_of(key):
                self._tell_pod(pod_key, reason_for_pod(reason, pod_key))
            pg = mirror.raw_podgroups.get(key)
            if pg is not None and changed:
                self.events.emit(pg, "Warning", "Unschedulable", reason)
                queue = str((pg.get("spec") or {}).get("queue", ""))
                self._cleared.discard(key)
                self._pool.submit(self._write_condition, key, queue, reason)
        for subject in [k for k in self._reasons if k not in wanted]:
            del self._reasons[subject]
            self.metrics.pending_clear(subject)
            kind, _, key = subject.partition("/")
            if kind == "job" and key in mirror.raw_podgroups:
                self._cleared.add(key)
                self._pool.submit(self._write_condition, key, "", "")
            for pod_key in mirror.pods_of_job(key) if kind == "job" else (key,):
                self._told.pop(pod_key, None)
        # A PodGroup whose stored conditions say it waits while it does not (written by
        # an earlier run of the scheduler, or before a restart) is cleared once.
        for key in dirty:
            pg = mirror.raw_podgroups.get(key)
            if pg is None or f"job/{key}" in wanted or key in self._cleared:
                continue
            if (pg.get("status") or {}).get("schedulingConditions"):
                self._cleared.add(key)
                self._pool.submit(self._write_condition, key, "", "")
        if len(self._told) > len(mirror.raw_pods) + 1000:
            self._told = {k: v for k, v in self._told.items() if k in mirror.raw_pods}

    def _tell_pod(self, pod_key: str, reason: str) -> None:
        """An ``Unschedulable`` event and ``PodScheduled=False`` on a pending pod, once per
        reason."""
        raw = self.mirror.raw_pods.get(pod_key)
        if raw is None or self._told.get(pod_key) == reason:
            return
        self._told[pod_key] = reason
        self.events.emit(raw, "Warning", "Unschedulable", reason)
        self._pool.submit(mark_unschedulable, self.client, raw, reason)

    def _queue_of(self, kind: str, key: str) -> str:
        mirror = self.mirror
        if kind == "job":
            job = mirror.state.jobs.get(key)
            if job is not None:
                return job.queue
            pg = mirror.raw_podgroups.get(key)
            return str(((pg or {}).get("spec") or {}).get("queue", ""))
        raw = mirror.raw_pods.get(key) or {}
        return str(((raw.get("metadata") or {}).get("labels") or {}).get(
            QUEUE_LABEL, ""))

    def _write_condition(self, job_key: str, queue: str, reason: str) -> None:
        namespace, _, name = job_key.partition("/")
        conditions: list[Obj] = []
        if reason:
            pg = self.mirror.raw_podgroups.get(job_key) or {}
            pool = ((pg.get("metadata") or {}).get("labels") or {}).get(NODE_POOL_LABEL)
            conditions.append(podgroup_unschedulable(
                reason, queue, str(pool or "default"),
                (pg.get("status") or {}).get("schedulingConditions"), now_rfc3339()))
        try:
            self.client.merge_patch(PODGROUPS.item(name, namespace, "status"),
                                    {"status": {"schedulingConditions": conditions}})
        except ApiError as error:
            if error.not_found:
                return
            try:  # a server without the status subresource for PodGroups
                self.client.merge_patch(PODGROUPS.item(name, namespace),
                                        {"status": {"schedulingConditions": conditions}})
            except ApiError:
                log.debug("PodGroup %s condition not written: %s", job_key, error)

    def _publish_phases(self) -> None:
        """Queue a ``status.phase`` write for each PodGroup whose phase changed."""
        mirror = self.mirror
        for job_key in mirror.dirty_jobs:
            job = mirror.state.jobs.get(job_key)
            pg = mirror.raw_podgroups.get(job_key)
            if job is None or pg is None:
                continue
            phase = podgroup_phase(job.min_member, [mirror.state.pods[k].status for k in job.pods])
            if job.not_before == math.inf:
                phase = "Failed"  # it ran past its maximum runtime (policy fail)
            written = self._phases.get(job_key, (pg.get("status") or {}).get("phase"))
            if phase != written:
                self._phases[job_key] = phase
                self._phase_queue.add(job_key)
        mirror.dirty_jobs.clear()

    def _write_phase(self, job_key: str) -> None:
        """Write a PodGroup's phase; binds in flight go first."""
        waited = 0.0
        while self._binds_in_flight and waited < PHASE_MAX_WAIT_SECONDS:
            if self.stopper.wait(PHASE_YIELD_SECONDS):
                return
            waited += PHASE_YIELD_SECONDS
        phase = self._phases.get(job_key)
        if phase is None:
            return
        namespace, _, name = job_key.partition("/")
        try:
            self.client.merge_patch(PODGROUPS.item(name, namespace, "status"),
                                    {"status": {"phase": phase}})
        except ApiError as error:
            if not error.not_found:
                raise

    def _publish_queues(self, result: CycleResult) -> None:
        reports = {name: figures_of(report) for name, report in result.queues.items()
                   if name != ORPHAN_QUEUE}
        if reports != self.figures.reports:
            old = self.figures.reports
            self.metrics.queue_reports(
                result.queues, [n for n, r in reports.items() if old.get(n) != r])
            with self.figures_changed:
                self.figures.reports = reports
                self.figures.version += 1
                self.figures_changed.notify_all()
