"""What one scheduling cycle decided: the result the scheduler loop applies."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpushare.model.reservation import Reservation


@dataclass(frozen=True, slots=True)
class Bind:
    pod: str  # "namespace/name"
    node: str
    gpu_indices: tuple[int, ...]  # physical GPU indices on the node
    portion_milli: int  # milli-GPUs of each listed GPU (1000 for whole GPUs, 0 for none)
    gpu_memory_mib: int  # per listed GPU the pod may use


@dataclass(frozen=True, slots=True)
class Pipeline:
    pod: str
    node: str
    gpu_indices: tuple[int, ...]
    portion_milli: int
    gpu_memory_mib: int


@dataclass(frozen=True, slots=True)
class Evict:
    pod: str
    reason: str
    action: str  # the action that chose it: reclaim, preempt, consolidation, stalegangeviction


@dataclass(frozen=True, slots=True)
class QueueReport:
    """Per-queue figures for Queue status, in natural units (GPUs, millicores, MiB)."""

    fair_share: dict[str, float]
    deserved: dict[str, float]
    allocated: dict[str, float]
    allocated_non_preemptible: dict[str, float]
    requested: dict[str, float]


@dataclass(slots=True)
class CycleResult:
    binds: list[Bind] = field(default_factory=list)
    pipelines: list[Pipeline] = field(default_factory=list)
    evictions: list[Evict] = field(default_factory=list)
    pending_reasons: dict[str, str] = field(default_factory=dict)  # job key -> reason
    queues: dict[str, QueueReport] = field(default_factory=dict)
    # Job key -> staleness start (None: no longer stale), for jobs stale now or at cycle start.
    stale_since: dict[str, float | None] = field(default_factory=dict)
    #: Per eviction action that ran: jobs searched for, units of search work done (the
    #: budget's currency), victim steps read, simulations, jobs that succeeded, and
    #: whether its search budget ran out (1) or not (0).
    searches: dict[str, dict[str, int]] = field(default_factory=dict)
    #: The reservations in force after the cycle, by job key (the next cycle's input).
    reservations: dict[str, Reservation] = field(default_factory=dict)
