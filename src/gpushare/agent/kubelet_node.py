"""``gpushare node-daemon``: GPU fractions on a node the kubelet runs.

The kubelet starts the pods; this daemon, one per GPU node (a DaemonSet), only
* runs an MPS control daemon per GPU under the node's MPS directory
  (``<dir>/gpu<index>/pipe``, the ``CUDA_MPS_PIPE_DIRECTORY`` the scheduler writes in each
  fractional pod's ConfigMap) and keeps them up;
* sets each MPS server's limits from the fractional pods bound to its GPU (a client can
  only lower its own below the server's);
* watches NVML's per-process memory and SM samples, finds the pod of each process through
  its cgroup (the kubelet puts a pod's containers under ``kubepods…pod<uid>``), and evicts
  through the Eviction API a pod over its memory share, or one whose processes escaped MPS
  and keep its GPU busier than its share for several passes.

It never writes the Node (status, conditions, addresses: the kubelet's) and never runs a
pod. The decisions are `NodeWatchdog.once`, over injected NVML, MPS and cgroup readers.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpushare.agent.gpu.gpu_share import (
    GpuAssignmentError,
    GpuShare,
    share_from_annotations,
    watchdog_limit_mib,
)
from gpushare.agent.gpu.mps import MpsManager, server_limits
from gpushare.agent.gpu.nvml import NvmlBackend
from gpushare.agent.gpu.watchdog import (
    PodLimit,
    attribute,
    compute_over,
    violations,
)
from gpushare.agent.node.inventory import GpuInventory
from gpushare.api.objects import Meta
from gpushare.kube.client import EVENTS, PODS, ApiError, KubeClient

log = logging.getLogger(__name__)

MEMORY_EXCEEDED = "GPUMemoryExceeded"
COMPUTE_EXCEEDED = "GPUComputeExceeded"
_POD_UID = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")

#: (pod key, reason, message) -> None: evict the pod (the shell posts an Eviction)
Evict = Callable[[str, str, str], None]


def pod_uid_from_cgroup(text: str) -> str | None:
    """The pod UID in a ``/proc/<pid>/cgroup`` (cgroup v1 or v2, cgroupfs or systemd
    driver) of a process the kubelet started; None for any other process."""
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        if "kubepods" not in path:
            continue
        found = _POD_UID.search(path)
        if found:
            return found.group(1).replace("_", "-")
    return None


def proc_cgroup(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None


@dataclass(frozen=True, slots=True)
class KubeletPod:
    key: str  # namespace/name
    uid: str
    share: GpuShare


def node_pods(pods: Iterable[dict[str, Any]], node: str,
              inventory: GpuInventory) -> tuple[list[KubeletPod], list[str]]:
    """The pods bound to ``node`` that hold GPUs and are not finished; and, one line each,
    those whose binding cannot be read (they are left alone, not guessed at)."""
    out: list[KubeletPod] = []
    errors: list[str] = []
    for pod in pods:
        meta = Meta.of(pod)
        if (pod.get("spec") or {}).get("nodeName") != node:
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        key = f"{meta.namespace}/{meta.name}"
        try:
            share = share_from_annotations(meta.annotations, inventory)
        except GpuAssignmentError as error:
            errors.append(f"{key}: {error}")
            continue
        if share is not None and meta.uid:
            out.append(KubeletPod(key, meta.uid, share))
    return out, errors


@dataclass(slots=True)
class PassResult:
    limits: dict[str, PodLimit]
    evicted: list[tuple[str, str, str]] = field(default_factory=list)
    mps_changed: list[int] = field(default_factory=list)


class NodeWatchdog:
    """One pass = read NVML, attribute to pods, set MPS limits, evict who is over."""

    def __init__(self, nvml: NvmlBackend, inventory: GpuInventory, evict: Evict,
                 mps: MpsManager | None = None,
                 read_cgroup: Callable[[int], str | None] = proc_cgroup,
                 tolerance_fraction: float = 0.05, tolerance_mib: int = 512,
                 compute_policy: str = "evict", compute_tolerance_percent: int = 10,
                 compute_passes: int = 5) -> None:
        if compute_policy not in ("evict", "off"):
            raise ValueError(f"compute_policy {compute_policy!r}: expected evict or off")
        self.nvml, self.inventory, self.mps = nvml, inventory, mps
        self._evict, self._read_cgroup = evict, read_cgroup
        self.tolerance_fraction, self.tolerance_mib = tolerance_fraction, tolerance_mib
        self.compute_policy = compute_policy
        self.compute_tolerance_percent, self.compute_passes = (compute_tolerance_percent,
                                                               compute_passes)
        self._streaks: dict[tuple[str, int], int] = {}
        self._evicted: set[str] = set()  # asked already; forgotten once the pod is gone
        self._since_us = 0

    def limits(self, pods: Iterable[KubeletPod]) -> dict[str, PodLimit]:
        return {p.key: PodLimit(
            pod=p.key, gpu_indices=tuple(d.index for d in p.share.devices),
            limit_mib=watchdog_limit_mib(p.share, self.tolerance_fraction, self.tolerance_mib),
            share_mib=p.share.memory_mib,
            share_percent=100 if p.share.whole else p.share.thread_percentage) for p in pods}

    def _owner_lookup(self, pods: Iterable[KubeletPod]) -> Callable[[int], str | None]:
        by_uid = {p.uid: p.key for p in pods}

        def owner_of(pid: int) -> str | None:
            text = self._read_cgroup(pid)
            uid = pod_uid_from_cgroup(text) if text else None
            return by_uid.get(uid) if uid else None

        return owner_of

    def _ask(self, result: PassResult, key: str, reason: str, message: str) -> None:
        if key in self._evicted:
            return
        try:
            self._evict(key, reason, message)
        except Exception as error:  # refused (a PodDisruptionBudget) or unreachable: next pass
            log.warning("evicting %s (%s) failed: %s", key, reason, error)
            return
        self._evicted.add(key)
        result.evicted.append((key, reason, message))

    def once(self, pods: list[KubeletPod]) -> PassResult:
        self._evicted &= {p.key for p in pods}
        limits = self.limits(pods)
        result = PassResult(limits)
        if self.mps is not None:
            shares = [(d.index, p.share.thread_percentage, p.share.memory_mib)
                      for p in pods if not p.share.whole for d in p.share.devices]
            result.mps_changed = self.mps.apply_limits(server_limits(shares))
        indices = [d.index for d in self.inventory.devices]
        per_gpu = {i: self.nvml.compute_processes(i) for i in indices}
        samples = {i: self.nvml.process_utilization(i, self._since_us) for i in indices}
        stamps = [s.timestamp_us for got in samples.values() for s in got]
        self._since_us = max(stamps, default=self._since_us)
        owner_of = self._owner_lookup(pods)
        for violation in violations(attribute(per_gpu, owner_of), limits):
            if violation.pod in limits:  # a process of a pod without GPUs is not ours to judge
                self._ask(result, violation.pod, MEMORY_EXCEEDED, violation.message)
        if self.compute_policy == "evict":
            self._compute(result, samples, owner_of, limits)
        return result

    def _compute(self, result: PassResult, samples: dict[int, list[Any]],
                 owner_of: Callable[[int], str | None], limits: dict[str, PodLimit]) -> None:
        served = self.mps.clients() if self.mps is not None else set()
        unlimited = {i: [s for s in got if s.pid not in served] for i, got in samples.items()}
        over = compute_over(attribute({}, owner_of, unlimited), limits,
                            self.compute_tolerance_percent)
        self._streaks = {key: self._streaks.get(key, 0) + 1 for key in over}
        for (key, index), streak in sorted(self._streaks.items()):
            if streak >= self.compute_passes:
                self._ask(result, key, COMPUTE_EXCEEDED,
                          f"GPU {index}: the pod's processes outside MPS kept the GPU "
                          f"{over[(key, index)]}% busy for {streak} passes; its share is "
                          f"{limits[key].share_percent}%")


def evict_through_api(client: KubeClient, node: str) -> Evict:
    """Evict with the Eviction API (PodDisruptionBudgets apply) and say why in an Event."""

    def evict(key: str, reason: str, message: str) -> None:
        namespace, _, name = key.partition("/")
        client.create(PODS.item(name, namespace, "eviction"), {
            "apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace}})
        log.warning("evicted %s: %s: %s", key, reason, message)
        with contextlib.suppress(ApiError):
            client.create(EVENTS.collection(namespace), {
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{name}.", "namespace": namespace},
                "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": name,
                                   "namespace": namespace},
                "reason": reason, "message": message, "type": "Warning",
                "source": {"component": "gpushare-node-daemon", "host": node},
                "reportingComponent": "gpushare-node-daemon", "reportingInstance": node})

    return evict


def run(client: KubeClient, node: str, inventory: GpuInventory, watchdog: NodeWatchdog,
        stop: threading.Event, period: float = 2.0) -> None:
    """Start the MPS daemons (an error stops the daemon: no GPU share runs unenforced),
    then watch until ``stop``; the MPS daemons are stopped on the way out."""
    mps = watchdog.mps
    if mps is not None:
        errors = mps.start_all()
        if errors:
            raise RuntimeError("MPS control daemons did not start: " + "; ".join(errors))
    try:
        while not stop.wait(period):
            if mps is not None:
                mps.supervise()
            try:
                listed = client.list(PODS.collection(), fieldSelector=f"spec.nodeName={node}")
            except Exception as error:
                log.warning("listing the pods of node %s: %s", node, error)
                continue
            pods, errors = node_pods(listed.get("items") or [], node, inventory)
            for line in errors:
                log.warning("not watched: %s", line)
            watchdog.once(pods)
    finally:
        if mps is not None:
            left = mps.stop_all()
            if left:
                log.warning("MPS servers still running: %s", left)
