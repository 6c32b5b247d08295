"""Pods (tasks): what each asks for and where it stands."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from gpushare.model.quantities import MILLI, Res


class PodStatus(enum.Enum):
    PENDING = "Pending"
    BINDING = "Binding"  # placed on free capacity this cycle (or the bind is still under way)
    RUNNING = "Running"
    PIPELINED = "Pipelined"  # placed on capacity that Releasing pods still hold
    RELEASING = "Releasing"  # being evicted
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


#: Pods that hold what they were given on their node.
ON_NODE = frozenset(
    {PodStatus.BINDING, PodStatus.RUNNING, PodStatus.PIPELINED, PodStatus.RELEASING}
)
#: Pods that count for their job's gang and their queue's allocation.
ACTIVE_ALLOCATED = frozenset({PodStatus.BINDING, PodStatus.RUNNING, PodStatus.PIPELINED})
FINISHED = frozenset({PodStatus.SUCCEEDED, PodStatus.FAILED})


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """What one pod asks of GPUs: whole GPUs, or a share (portion or memory) of N GPUs."""

    whole: int = 0
    portion: int = 0  # milli-GPU of each shared GPU, 0 < portion < 1000
    memory_mib: int = 0  # alternative to a portion: this much memory of each shared GPU
    devices: int = 1  # shared GPUs, for portion / memory requests

    @property
    def is_shared(self) -> bool:
        return self.portion > 0 or self.memory_mib > 0

    @property
    def is_memory(self) -> bool:
        return self.memory_mib > 0

    @property
    def wants_gpu(self) -> bool:
        return self.whole > 0 or self.is_shared

    def portion_on(self, gpu_memory_mib: int) -> int:
        """The milli-GPU portion of each shared GPU on a node with GPUs of this memory.

        A memory request becomes a portion rounded to two decimals, as KAI does.
        """
        if self.portion:
            return self.portion
        if not self.memory_mib:
            return 0
        if gpu_memory_mib <= 0:
            return MILLI + 1  # never fits
        hundredths = Fraction(self.memory_mib * 100, gpu_memory_mib)
        rounded = int(hundredths + Fraction(1, 2))  # half up
        return max(rounded, 1) * 10 if self.memory_mib <= gpu_memory_mib else MILLI + 1

    def gpus_exact(self, gpu_memory_mib: int | None) -> Fraction:
        """GPU units requested, converting memory with the given per-GPU memory."""
        if self.whole:
            return Fraction(self.whole)
        if self.portion:
            return Fraction(self.portion * self.devices, MILLI)
        if self.memory_mib:
            if not gpu_memory_mib:
                return Fraction(0)
            return Fraction(self.memory_mib * self.devices, gpu_memory_mib)
        return Fraction(0)

    def reported_gpus(self) -> float:
        """The request in GPU units as reports show it (0 for a memory request)."""
        if self.whole:
            return float(self.whole)
        if self.portion:
            return float(Fraction(self.portion * self.devices, MILLI))
        return 0.0


@dataclass(slots=True, eq=False)
class Pod:
    name: str
    namespace: str
    job: str  # key of its job, "namespace/name"
    index: int  # position inside its job, the last tie-breaker of task order
    gpu: GpuRequest = field(default_factory=GpuRequest)
    cpu_millis: int = 0
    memory_bytes: int = 0
    status: PodStatus = PodStatus.PENDING
    node: str | None = None
    gpu_indices: tuple[int, ...] = ()  # physical GPUs held on its node
    portion: int = 0  # milli-GPU held on each of gpu_indices (1000 for whole GPUs)
    started_at: float = float("-inf")  # when it started running, caller's clock
    priority: int | None = None  # per-pod override of the job's priority
    node_selector: dict[str, str] = field(default_factory=dict)
    #: Required node affinity: every (label, allowed values) must hold (``In`` terms).
    node_affinity: tuple[tuple[str, tuple[str, ...]], ...] = ()
    task_order: int | None = None  # rank inside the job, higher first
    subgroup: str | None = None
    # What the last cycle did to it, for decisions and reasons.
    evict_reason: str = ""
    evict_action: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def matches_labels(self, labels: dict[str, str]) -> bool:
        """Whether a node with these labels satisfies the node selector and affinity."""
        for k, v in self.node_selector.items():
            if labels.get(k) != v:
                return False
        return all(labels.get(k) in values for k, values in self.node_affinity)

    def constraints(self) -> tuple[Any, ...]:
        """The node selector and affinity as one hashable value (for shape keys)."""
        return (tuple(sorted(self.node_selector.items())), self.node_affinity)

    def held(self) -> Res:
        """Milli-GPUs, millicores and bytes the pod holds (or would hold) at its portion."""
        if self.gpu.whole:
            gpu = self.gpu.whole * MILLI
        elif self.gpu.is_shared:
            gpu = self.portion * len(self.gpu_indices) if self.gpu_indices else 0
        else:
            gpu = 0
        return Res(gpu, self.cpu_millis, self.memory_bytes)
