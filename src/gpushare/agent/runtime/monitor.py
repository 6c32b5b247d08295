"""The watchdog and usage pass over NVML, with no API in sight (the agent wires it up).

Each pass reads NVML's per-process memory and SM samples, attributes processes to pods
through the process groups the supervisors started (or their ancestors' groups), kills pods
over their share and hands per-pod and per-node usage to a callback.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import psutil

from gpushare.agent.gpu.gpu_share import GpuShare, watchdog_limit_mib
from gpushare.agent.gpu.nvml import NvmlBackend, ProcessUtilization
from gpushare.agent.gpu.watchdog import (
    ComputeViolation,
    PodGpuUsage,
    PodLimit,
    Violation,
    attribute,
    compute_over,
    violations,
)
from gpushare.agent.node.inventory import GpuInventory
from gpushare.agent.runtime.supervisor import PodSupervisor

COMPUTE_POLICIES = ("evict", "event", "off")
COMPUTE_EXCEEDED = "GPUComputeExceeded"


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
    compute_killed: list[ComputeViolation] = field(default_factory=list)
    compute_over: list[ComputeViolation] = field(default_factory=list)  # evicted or not


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
        compute_policy: str = "off",
        mps_clients: Callable[[], set[int]] | None = None,
        compute_tolerance_percent: int = 10,
        compute_passes: int = 5,
        on_compute_kill: Callable[[WatchedPod, ComputeViolation], None] | None = None,
    ) -> None:
        """`compute_policy`: what to do with a fractional pod whose processes that no MPS
        server limits (`mps_clients()` lists those it does) keep its GPU busier than its
        share plus `compute_tolerance_percent` for `compute_passes` passes in a row:
        `evict` it (Failed, GPUComputeExceeded), only report it (`event`), or `off`."""
        if compute_policy not in COMPUTE_POLICIES:
            raise ValueError(f"compute_policy {compute_policy!r}: expected one of "
                             f"{', '.join(COMPUTE_POLICIES)}")
        self.compute_policy = compute_policy
        self._mps_clients = mps_clients
        self.compute_tolerance_percent = compute_tolerance_percent
        self.compute_passes = compute_passes
        self._on_compute_kill = on_compute_kill
        self._streaks: dict[tuple[str, int], int] = {}
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
                share_percent=100 if p.share.whole else p.share.thread_percentage,
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
        owner_of = self.owner_lookup(pods)
        usage = attribute(per_gpu, owner_of, utilization)
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
        over = self._compute(pods, utilization, owner_of, limits)
        return MonitorResult(usage=usage, limits=limits, killed=killed,
                             compute_killed=[v for v in over if self.compute_policy == "evict"],
                             compute_over=over)

    def _compute(
        self,
        pods: list[WatchedPod],
        utilization: Mapping[int, list[ProcessUtilization]],
        owner_of: Callable[[int], str | None],
        limits: Mapping[str, PodLimit],
    ) -> list[ComputeViolation]:
        """The compute watchdog: pods over their SM share outside MPS, `compute_passes` in a
        row, dealt with by the policy."""
        if self.compute_policy == "off":
            return []
        served = self._mps_clients() if self._mps_clients is not None else set()
        unlimited = {i: [s for s in samples if s.pid not in served]
                     for i, samples in utilization.items()}
        usage = attribute({}, owner_of, unlimited)
        over = compute_over(usage, limits, self.compute_tolerance_percent)
        self._streaks = {key: self._streaks.get(key, 0) + 1 for key in over}
        by_key = {p.key: p for p in pods}
        found = []
        for (key, index), streak in sorted(self._streaks.items()):
            pod = by_key.get(key)
            if streak < self.compute_passes or pod is None or pod.supervisor.finished:
                continue
            pids = sorted({s.pid for s in unlimited.get(index, []) if owner_of(s.pid) == key})
            violation = ComputeViolation(key, index, over[(key, index)],
                                         limits[key].share_percent, streak, tuple(pids))
            found.append(violation)
            if self.compute_policy == "evict":
                pod.supervisor.kill(COMPUTE_EXCEEDED, violation.message)
            if self._on_compute_kill is not None:
                self._on_compute_kill(pod, violation)
            del self._streaks[(key, index)]
        return found
