"""What the agent measures of its node and its pods, for ``/metrics`` and ``kubectl top``.

* `ProcessSampler`: per container, the CPU rate over the last window and the memory in use:
  from the container's cgroup where it has one (CPU time of all its processes; the working
  set, usage less inactive file cache, as a kubelet reports it), else from its process
  group's processes (the leader and its descendants; resident memory); and the node's CPU
  and memory in use.
* `AgentMetrics`: the agent's Prometheus registry — GPU slots held per GPU, portion booked,
  GPU memory used as NVML reports it, enforcement backend, watchdog kills, pods running, and
  the pods' CPU / memory / GPU memory.
* `AgentTelemetry`: one thread that samples every ``interval`` and sends both to the
  control plane (`MetricsPusher` for the figures; ``PUT /metrics/resource/<node>`` for the
  measurements that ``metrics.k8s.io`` serves).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import psutil
from prometheus_client import CollectorRegistry, Counter, Gauge

from gpushare.agent.gpu.gpu_share import GpuShare
from gpushare.agent.node.inventory import GpuInventory
from gpushare.agent.runtime.cgroups import CgroupSet
from gpushare.api.timefmt import rfc3339
from gpushare.kube.client import ApiError, KubeClient, Stopper
from gpushare.kube.metrics_push import MetricsPusher

log = logging.getLogger(__name__)

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ContainerGroup:
    pod: str  # namespace/name
    container: str
    pgid: int
    cgroup: CgroupSet | None = None  # the container's cgroup, where the node makes them


@dataclass(slots=True)
class ContainerUsage:
    cpu_cores: float
    memory_bytes: int


@dataclass(slots=True)
class _ProcSeen:
    cpu_seconds: float


class ProcessSampler:
    """CPU rates need two looks: the first sample of a process sets its baseline."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._seen: dict[tuple[int, float], _ProcSeen] = {}
        self._cgroup_seen: dict[str, float] = {}  # CPU seconds by cgroup directory
        self._at: float | None = None

    @staticmethod
    def _processes(pgid: int) -> list[psutil.Process]:
        try:
            leader = psutil.Process(pgid)
        except psutil.Error:
            return []
        out = [leader]
        with contextlib.suppress(psutil.Error):
            out.extend(leader.children(recursive=True))
        return out

    def sample(self, groups: Iterable[ContainerGroup]) -> dict[tuple[str, str], ContainerUsage]:
        now = self._clock()
        window = None if self._at is None else max(now - self._at, 1e-6)
        seen: dict[tuple[int, float], _ProcSeen] = {}
        cgroup_seen: dict[str, float] = {}
        out: dict[tuple[str, str], ContainerUsage] = {}
        for group in groups:
            measured = self._from_cgroup(group, window, cgroup_seen)
            if measured is not None:
                usage = out.setdefault((group.pod, group.container), ContainerUsage(0.0, 0))
                usage.cpu_cores += measured.cpu_cores
                usage.memory_bytes += measured.memory_bytes
                continue
            cpu_delta = 0.0
            rss = 0
            for proc in self._processes(group.pgid):
                try:
                    with proc.oneshot():
                        key = (proc.pid, proc.create_time())
                        times = proc.cpu_times()
                        rss += int(proc.memory_info().rss)
                except psutil.Error:
                    continue
                total = float(times.user + times.system)
                before = self._seen.get(key)
                if before is not None:
                    cpu_delta += max(total - before.cpu_seconds, 0.0)
                elif window is not None:
                    cpu_delta += total  # started within the window
                seen[key] = _ProcSeen(total)
            usage = out.setdefault((group.pod, group.container), ContainerUsage(0.0, 0))
            usage.cpu_cores += cpu_delta / window if window else 0.0
            usage.memory_bytes += rss
        self._seen = seen
        self._cgroup_seen = cgroup_seen
        self._at = now
        return out

    def _from_cgroup(self, group: ContainerGroup, window: float | None,
                     seen: dict[str, float]) -> ContainerUsage | None:
        """The container's usage from its cgroup; None when it has none to read."""
        if group.cgroup is None:
            return None
        cpu = group.cgroup.cpu_seconds()
        memory = group.cgroup.memory_working_set()
        if cpu is None or memory is None:
            return None
        key = group.cgroup.to_json()
        seen[key] = cpu
        before = self._cgroup_seen.get(key)
        rate = 0.0 if before is None or not window else max(cpu - before, 0.0) / window
        return ContainerUsage(rate, memory)


def node_usage() -> tuple[float, int]:
    """(cores in use, bytes of memory in use) of the whole machine since the last call."""
    cores = psutil.cpu_percent(interval=None) / 100.0 * (psutil.cpu_count() or 1)
    vm = psutil.virtual_memory()
    return cores, int(vm.total - vm.available)


@dataclass(slots=True)
class PodView:
    """What the telemetry needs to know of one running pod."""

    namespace: str
    name: str
    share: GpuShare | None
    groups: list[ContainerGroup] = field(default_factory=list)


class AgentMetrics:
    def __init__(self, node: str, inventory: GpuInventory, enforcement: str,
                 registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        self.node = node
        gpu = ("node", "gpu")
        self.slots = Gauge("gpushare_gpu_slots_held", "Pods holding a share of the GPU "
                           "(fraction or whole)", gpu, registry=r)
        self.portion = Gauge("gpushare_gpu_allocated_portion", "Sum of the GPU portions booked "
                             "by the pods running on it (1 = the whole GPU)", gpu, registry=r)
        self.memory_total = Gauge("gpushare_gpu_memory_total_bytes", "GPU memory", gpu,
                                  registry=r)
        self.memory_used = Gauge("gpushare_gpu_memory_used_bytes", "GPU memory in use as NVML "
                                 "reports it (only where NVML is)", gpu, registry=r)
        self.pod_gpu_memory = Gauge("gpushare_pod_gpu_memory_used_bytes", "GPU memory used by "
                                    "a pod's processes (NVML)", ("namespace", "pod", "gpu"),
                                    registry=r)
        self.enforcement = Gauge("gpushare_node_enforcement_info", "The GPU share enforcement "
                                 "backend of the node (value 1)", ("node", "backend"),
                                 registry=r)
        self.kills = Counter("gpushare_watchdog_kills", "Pods the NVML watchdog killed for "
                             "exceeding their GPU memory share", ("node",), registry=r)
        self.mps_faults = Counter("gpushare_mps_server_faults", "MPS servers that went into "
                                  "FAULT (a fatal GPU fault in one of their clients)", gpu,
                                  registry=r)
        self.mps_restarts = Counter("gpushare_mps_daemon_restarts", "MPS control daemons "
                                    "restarted because their server stayed in FAULT", gpu,
                                    registry=r)
        self.mps_ended = Counter("gpushare_mps_clients_terminated", "MPS clients ended with "
                                 "terminate_client before their pod's processes were "
                                 "signalled (only with --mps-stop terminate-client)",
                                 ("node", "result"), registry=r)
        self.compute_kills = Counter("gpushare_watchdog_compute_kills", "Pods the compute "
                                     "watchdog evicted for using more of a GPU than their "
                                     "share outside MPS", ("node",), registry=r)
        self.pods_running = Gauge("gpushare_node_pods_running", "Pods with processes the agent "
                                  "supervises", ("node",), registry=r)
        self.pod_cpu = Gauge("gpushare_pod_cpu_usage_cores", "CPU rate of a pod's processes "
                             "over the last window", ("namespace", "pod"), registry=r)
        self.pod_memory = Gauge("gpushare_pod_memory_working_set_bytes", "Resident memory of "
                                "a pod's processes", ("namespace", "pod"), registry=r)
        self.enforcement.labels(node, enforcement).set(1)
        self.kills.labels(node)
        self.compute_kills.labels(node)
        for device in inventory.devices:
            self.mps_faults.labels(node, str(device.index))
        for device in inventory.devices:
            self.memory_total.labels(node, str(device.index)).set(device.memory_mib * MIB)
            self.slots.labels(node, str(device.index)).set(0)
            self.portion.labels(node, str(device.index)).set(0)
        self._pod_labels: set[tuple[str, str]] = set()
        self._pod_gpu_labels: set[tuple[str, str, str]] = set()

    def killed(self) -> None:
        self.kills.labels(self.node).inc()

    def compute_killed(self) -> None:
        self.compute_kills.labels(self.node).inc()

    def mps_fault(self, gpu: int) -> None:
        self.mps_faults.labels(self.node, str(gpu)).inc()

    def mps_daemon_restart(self, gpu: int) -> None:
        self.mps_restarts.labels(self.node, str(gpu)).inc()

    def mps_client_ended(self, ok: bool) -> None:
        self.mps_ended.labels(self.node, "ok" if ok else "refused").inc()

    def gpu_memory(self, used_bytes: dict[int, int],
                   per_pod_mib: dict[str, dict[int, int]]) -> None:
        """After an NVML pass: device memory in use and each pod's."""
        for index, used in used_bytes.items():
            self.memory_used.labels(self.node, str(index)).set(used)
        labels: set[tuple[str, str, str]] = set()
        for key, by_gpu in per_pod_mib.items():
            namespace, _, name = key.partition("/")
            for index, mib in by_gpu.items():
                label = (namespace, name, str(index))
                labels.add(label)
                self.pod_gpu_memory.labels(*label).set(mib * MIB)
        for gone in self._pod_gpu_labels - labels:
            with contextlib.suppress(KeyError):
                self.pod_gpu_memory.remove(*gone)
        self._pod_gpu_labels = labels

    def pods(self, pods: list[PodView], usage: dict[tuple[str, str], ContainerUsage],
             inventory: GpuInventory) -> None:
        slots = {d.index: 0 for d in inventory.devices}
        milli = {d.index: 0 for d in inventory.devices}
        for pod in pods:
            if pod.share is None:
                continue
            for device in pod.share.devices:
                slots[device.index] = slots.get(device.index, 0) + 1
                milli[device.index] = milli.get(device.index, 0) + pod.share.portion_milli
        for index in slots:
            self.slots.labels(self.node, str(index)).set(slots[index])
            self.portion.labels(self.node, str(index)).set(milli.get(index, 0) / 1000)
        self.pods_running.labels(self.node).set(len(pods))
        by_pod: dict[str, tuple[float, int]] = {}
        for (key, _container), u in usage.items():
            cpu, mem = by_pod.get(key, (0.0, 0))
            by_pod[key] = (cpu + u.cpu_cores, mem + u.memory_bytes)
        labels: set[tuple[str, str]] = set()
        for pod in pods:
            label = (pod.namespace, pod.name)
            labels.add(label)
            cpu, mem = by_pod.get(f"{pod.namespace}/{pod.name}", (0.0, 0))
            self.pod_cpu.labels(*label).set(round(cpu, 6))
            self.pod_memory.labels(*label).set(mem)
        for gone in self._pod_labels - labels:
            with contextlib.suppress(KeyError):
                self.pod_cpu.remove(*gone)
            with contextlib.suppress(KeyError):
                self.pod_memory.remove(*gone)
        self._pod_labels = labels


def usage_report(pods: list[PodView], usage: dict[tuple[str, str], ContainerUsage],
                 gpu_mib: dict[str, dict[int, int]], node: tuple[float, int],
                 window: float) -> dict[str, object]:
    """The body of ``PUT /metrics/resource/<node>``."""
    out_pods = []
    for pod in pods:
        key = f"{pod.namespace}/{pod.name}"
        names = sorted({g.container for g in pod.groups})
        gpu_total = sum(gpu_mib.get(key, {}).values()) * MIB
        containers = []
        for i, name in enumerate(names):
            u = usage.get((key, name), ContainerUsage(0.0, 0))
            containers.append({"name": name, "cpu": round(u.cpu_cores, 9),
                               "memory": u.memory_bytes,
                               # NVML counts per process, not per container: the pod's
                               # GPU memory goes on its first container
                               "gpuMemory": gpu_total if i == 0 else 0})
        if containers:
            out_pods.append({"namespace": pod.namespace, "name": pod.name,
                             "containers": containers})
    return {"timestamp": rfc3339(time.time()), "window": round(window, 3),
            "node": {"cpu": round(node[0], 9), "memory": node[1]}, "pods": out_pods}


class AgentTelemetry:
    def __init__(self, kube: KubeClient, metrics: AgentMetrics, inventory: GpuInventory,
                 pods: Callable[[], list[PodView]],
                 gpu_usage: Callable[[], dict[str, dict[int, int]]],
                 stopper: Stopper, interval: float = 5.0) -> None:
        self.kube = kube
        self.metrics = metrics
        self.inventory = inventory
        self._pods = pods
        self._gpu_usage = gpu_usage
        self.stopper = stopper
        self.interval = interval
        self.sampler = ProcessSampler()
        self.pusher = MetricsPusher(kube, metrics.registry, "agent", stopper,
                                    instance=metrics.node, interval=interval)
        self._usage_disabled = False
        self._last_at: float | None = None

    def once(self) -> dict[str, object]:
        pods = self._pods()
        groups = [g for p in pods for g in p.groups]
        usage = self.sampler.sample(groups)
        node = node_usage()
        now = time.monotonic()
        window = self.interval if self._last_at is None else now - self._last_at
        self._last_at = now
        self.metrics.pods(pods, usage, self.inventory)
        report = usage_report(pods, usage, self._gpu_usage(), node, window)
        if not self._usage_disabled:
            try:
                self.kube.request("PUT", f"/metrics/resource/{self.metrics.node}", body=report,
                                  query=[("interval", f"{self.interval:g}")], timeout=10.0)
            except ApiError as error:
                if error.status != 404:
                    raise
                self._usage_disabled = True
                log.info("the API server takes no resource measurements: %s", error)
        self.pusher.push_once()
        return report

    def _run(self) -> None:
        with contextlib.suppress(Exception):
            self.sampler.sample(g for p in self._pods() for g in p.groups)  # baselines
            node_usage()
        while not self.stopper.wait(self.interval):
            try:
                self.once()
            except Exception as error:
                log.debug("telemetry push failed: %s", error)

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self._run, name="telemetry", daemon=True)
        thread.start()
        return thread
