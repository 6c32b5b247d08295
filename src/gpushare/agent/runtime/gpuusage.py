"""What a GPU watchdog pass measured, told to the control plane: each pod's GPU use as an
annotation on the pod, the node's totals as one on the Node (both only when they changed,
at most every `interval_s`), and the device memory in the agent's metrics."""

from __future__ import annotations

import contextlib
import queue
import time

from gpushare.agent.gpu.nvml import NvmlBackend
from gpushare.agent.gpu.watchdog import PodGpuUsage, node_totals
from gpushare.agent.node import node as nodes
from gpushare.agent.node.inventory import GpuInventory
from gpushare.agent.pods.statuswriter import Write
from gpushare.agent.runtime.monitor import MonitorResult
from gpushare.agent.runtime.telemetry import AgentMetrics
from gpushare.api.contracts import GPU_USAGE_ANNOTATION
from gpushare.kube.client import NODES, KubeClient


class UsageReport:
    def __init__(self, kube: KubeClient, node_name: str, writes: queue.Queue[Write],
                 inventory: GpuInventory, nvml: NvmlBackend | None, metrics: AgentMetrics,
                 interval_s: float) -> None:
        self._kube, self._node_name, self._writes = kube, node_name, writes
        self._inventory, self._nvml, self._metrics = inventory, nvml, metrics
        self._interval_s = interval_s
        self._last: dict[str, str] = {}  # pod key (or "" for the node) -> text last sent
        self._at = 0.0
        #: Per pod (namespace/name), MiB per GPU index of the last pass (for the telemetry).
        self.gpu_mib: dict[str, dict[int, int]] = {}

    def publish(self, result: MonitorResult) -> None:
        self.gpu_mib = {key: dict(u.memory_mib) for key, u in result.usage.items()}
        if self._nvml is not None:
            used: dict[int, int] = {}
            for device in self._inventory.devices:
                with contextlib.suppress(Exception):
                    used[device.index] = self._nvml.used_memory_bytes(device.index)
            self._metrics.gpu_memory(used, self.gpu_mib)
        now = time.monotonic()
        if now - self._at < self._interval_s:
            return
        self._at = now
        for key, limit in result.limits.items():
            text = (result.usage.get(key) or PodGpuUsage()).to_annotation(limit.share_mib)
            if self._last.get(key) != text:
                self._last[key] = text
                namespace, name = key.split("/", 1)
                self._writes.put(("annotations", namespace, name, "",
                                  {GPU_USAGE_ANNOTATION: text}))
        indices = [d.index for d in self._inventory.devices]
        totals = node_totals(result.usage, result.limits, indices)
        if self._last.get("") != totals:
            self._last[""] = totals
            with contextlib.suppress(Exception):
                self._kube.merge_patch(
                    NODES.item(self._node_name),
                    {"metadata": {"annotations": {nodes.ANN_GPU_USAGE: totals}}},
                )
