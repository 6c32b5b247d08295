"""The NVML watchdog: which pod holds which GPU memory, and who is over their share.

The decisions are pure functions of NVML's per-process numbers and the agent's table of
process groups; `GpuMonitor` is the thin shell that polls NVML and acts.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from gpushare.agent.gpu.nvml import GpuProcess, ProcessUtilization

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class PodLimit:
    pod: str  # namespace/name
    gpu_indices: tuple[int, ...]
    limit_mib: int  # per GPU, tolerance included
    share_mib: int  # per GPU, as granted
    share_percent: int = 100  # of each GPU's SMs, as granted (MPS's thread percentage)


@dataclass(slots=True)
class PodGpuUsage:
    memory_mib: dict[int, int] = field(default_factory=dict)  # per GPU index
    sm_percent: dict[int, int] = field(default_factory=dict)
    pids: set[int] = field(default_factory=set)

    def to_annotation(self, share_mib: int | None) -> str:
        gpus = [
            {
                "index": index,
                "memoryMiB": self.memory_mib.get(index, 0),
                "smUtil": self.sm_percent.get(index, 0),
            }
            for index in sorted(set(self.memory_mib) | set(self.sm_percent))
        ]
        body: dict[str, object] = {
            "memoryMiB": sum(self.memory_mib.values()),
            "smUtil": max(self.sm_percent.values(), default=0),
            "gpus": gpus,
        }
        if share_mib is not None:
            body["allocatedMemoryMiB"] = share_mib
        return json.dumps(body, separators=(",", ":"), sort_keys=True)


@dataclass(frozen=True, slots=True)
class Violation:
    pod: str
    gpu_index: int
    used_mib: int
    share_mib: int
    limit_mib: int
    pids: tuple[int, ...]

    @property
    def message(self) -> str:
        return (
            f"GPU {self.gpu_index}: the pod's processes {list(self.pids)} used "
            f"{self.used_mib} MiB of GPU memory; its share is {self.share_mib} MiB "
            f"(killed above {self.limit_mib} MiB)"
        )


def attribute(
    per_gpu: Mapping[int, Iterable[GpuProcess]],
    owner_of: Callable[[int], str | None],
    utilization: Mapping[int, Iterable[ProcessUtilization]] | None = None,
) -> dict[str, PodGpuUsage]:
    """Sum NVML's per-process memory (and SM samples) per pod.

    `owner_of(pid)` names the pod a process belongs to (through its process group or its
    ancestors), or None for a process the agent did not start (it is ignored).
    """
    usage: dict[str, PodGpuUsage] = {}
    for index, processes in per_gpu.items():
        for p in processes:
            owner = owner_of(p.pid)
            if owner is None:
                continue
            entry = usage.setdefault(owner, PodGpuUsage())
            entry.memory_mib[index] = entry.memory_mib.get(index, 0) + p.used_bytes // MIB
            entry.pids.add(p.pid)
    for index, samples in (utilization or {}).items():
        latest: dict[int, ProcessUtilization] = {}
        for s in samples:
            if s.pid not in latest or s.timestamp_us > latest[s.pid].timestamp_us:
                latest[s.pid] = s
        for s in latest.values():
            owner = owner_of(s.pid)
            if owner is None:
                continue
            entry = usage.setdefault(owner, PodGpuUsage())
            entry.sm_percent[index] = min(100, entry.sm_percent.get(index, 0) + s.sm_percent)
    return usage


def violations(usage: Mapping[str, PodGpuUsage], limits: Mapping[str, PodLimit]) -> list[Violation]:
    """Pods holding more memory on a GPU than their share allows (tolerance included).

    A pod with GPU memory on a GPU it was not given is over a share of zero.
    """
    found = []
    for pod, entry in sorted(usage.items()):
        limit = limits.get(pod)
        for index, used in sorted(entry.memory_mib.items()):
            if limit is None or index not in limit.gpu_indices:
                share, allowed = 0, 0
            else:
                share, allowed = limit.share_mib, limit.limit_mib
            if used > allowed:
                found.append(
                    Violation(
                        pod=pod,
                        gpu_index=index,
                        used_mib=used,
                        share_mib=share,
                        limit_mib=allowed,
                        pids=tuple(sorted(entry.pids)),
                    )
                )
    return found


def node_totals(
    usage: Mapping[str, PodGpuUsage], limits: Mapping[str, PodLimit], gpu_indices: Iterable[int]
) -> str:
    """The node's `gpushare.io/gpu-usage`: per GPU, memory used and allocated to pods."""
    gpus = []
    for index in sorted(gpu_indices):
        used = sum(u.memory_mib.get(index, 0) for u in usage.values())
        allocated = sum(lim.share_mib for lim in limits.values() if index in lim.gpu_indices)
        sm = min(100, sum(u.sm_percent.get(index, 0) for u in usage.values()))
        pods = sum(1 for lim in limits.values() if index in lim.gpu_indices)
        gpus.append(
            {
                "index": index,
                "memoryMiB": used,
                "allocatedMemoryMiB": allocated,
                "smUtil": sm,
                "pods": pods,
            }
        )
    return json.dumps({"gpus": gpus}, separators=(",", ":"), sort_keys=True)


@dataclass(frozen=True, slots=True)
class ComputeViolation:
    pod: str
    gpu_index: int
    sm_percent: int
    share_percent: int
    passes: int
    pids: tuple[int, ...]

    @property
    def message(self) -> str:
        return (
            f"GPU {self.gpu_index}: the pod's processes {list(self.pids)} kept the GPU busy "
            f"{self.sm_percent}% of the time for {self.passes} watchdog passes in a row, "
            f"outside MPS's limits (NVML per-process utilisation); its share is "
            f"{self.share_percent}%"
        )


def compute_over(
    usage: Mapping[str, PodGpuUsage], limits: Mapping[str, PodLimit], tolerance_percent: int
) -> dict[tuple[str, int], int]:
    """(pod, GPU index) -> SM % of the fractional pods whose processes used more of a GPU
    than their share plus the tolerance (`usage` must hold only the processes no MPS server
    limits: a capped MPS client is busy all the time on its slice of the SMs)."""
    over: dict[tuple[str, int], int] = {}
    for pod, entry in sorted(usage.items()):
        limit = limits.get(pod)
        if limit is None or limit.share_percent >= 100:
            continue
        for index, sm in sorted(entry.sm_percent.items()):
            if index in limit.gpu_indices and sm > limit.share_percent + tolerance_percent:
                over[(pod, index)] = sm
    return over
