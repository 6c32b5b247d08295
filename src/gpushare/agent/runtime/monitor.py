"""The watchdog and usage pass over NVML, with no API in sight (the agent wires it up).

Each pass reads NVML's per-process memory and SM samples, attributes processes to pods
through the process groups the supervisors started (or their ancestors' groups), kills pods
over their share and hands per-pod and per-node usage to a callback.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import psutil

from gpushare.agent.gpu.gpu_share import GpuShare, watchdog_limit_mib
from gpushare.agent.gpu.nvml import NvmlBackend
from gpushare.agent.gpu.watchdog import PodGpuUsage, PodLimit, Violation, attribute, violations
from gpushare.agent.node.inventory import GpuInventory
from gpushare.agent.runtime.supervisor import PodSupervisor


@dataclass(frozen=True, slots=True)
class WatchedPod:
    key: str  # namespace/name
    supervisor: PodSupervisor
    share: GpuShare | None


@dataclass(frozen=True, slots=True)
class MonitorResult:
    usage: dict[str, PodGpuUsage]
    limits: dict[str, PodLimit]
    killed: list[Violation]


class GpuMonitor:
    def __init__(
        self,
        nvml: NvmlBackend,
        inventory: GpuInventory,
        pods: Callable[[], list[WatchedPod]],
        on_kill: Callable[[WatchedPod, Violation], None] | None = None,
        tolerance_fraction: float = 0.05,
        tolerance_mib: int = 512,
        enforce: bool = True,
    ) -> None:
        self.nvml = nvml
        self.inventory = inventory
        self._pods = pods
        self._on_kill = on_kill
        self.tolerance_fraction = tolerance_fraction
        self.tolerance_mib = tolerance_mib
        self.enforce = enforce
        self._util_since_us = 0

    def limits(self, pods: list[WatchedPod]) -> dict[str, PodLimit]:
        return {
            p.key: PodLimit(
                pod=p.key,
                gpu_indices=tuple(d.index for d in p.share.devices),
                limit_mib=watchdog_limit_mib(p.share, self.tolerance_fraction, self.tolerance_mib),
                share_mib=p.share.memory_mib,
            )
            for p in pods
            if p.share is not None and not p.supervisor.finished
        }

    @staticmethod
    def owner_lookup(pods: list[WatchedPod]) -> Callable[[int], str | None]:
        groups = {pgid: p.key for p in pods for pgid in p.supervisor.process_groups()}

        def owner_of(pid: int) -> str | None:
            try:
                pgid = os.getpgid(pid)
            except (ProcessLookupError, PermissionError):
                return None
            if pgid in groups:
                return groups[pgid]
            # a process that made a session of its own still has the pod's group above it
            try:
                for parent in psutil.Process(pid).parents():
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        owner = groups.get(os.getpgid(parent.pid))
                        if owner is not None:
                            return owner
            except psutil.Error:
                return None
            return None

        return owner_of

    def once(self) -> MonitorResult:
        pods = self._pods()
        indices = [d.index for d in self.inventory.devices]
        per_gpu = {i: self.nvml.compute_processes(i) for i in indices}
        utilization = {i: self.nvml.process_utilization(i, self._util_since_us) for i in indices}
        stamps = [s.timestamp_us for samples in utilization.values() for s in samples]
        if stamps:
            self._util_since_us = max(stamps)
        usage = attribute(per_gpu, self.owner_lookup(pods), utilization)
        limits = self.limits(pods)
        killed: list[Violation] = []
        if self.enforce:
            by_key: Mapping[str, WatchedPod] = {p.key: p for p in pods}
            for violation in violations(usage, limits):
                pod = by_key.get(violation.pod)
                if pod is None or pod.supervisor.finished:
                    continue
                pod.supervisor.kill("GPUMemoryExceeded", violation.message)
                killed.append(violation)
                if self._on_kill is not None:
                    self._on_kill(pod, violation)
        return MonitorResult(usage=usage, limits=limits, killed=killed)
