"""Scheduler configuration (the scenario format's ``config`` block)."""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_ACTIONS: tuple[str, ...] = (
    "allocate",
    "consolidation",
    "reclaim",
    "preempt",
    "stalegangeviction",
)


@dataclass(frozen=True, slots=True)
class Config:
    actions: tuple[str, ...] = DEFAULT_ACTIONS
    gpu_placement: str = "binpack"  # binpack | spread | fgd | fragmentation
    cpu_placement: str = "binpack"
    staleness_grace_seconds: float = 60.0
    max_consolidation_preemptees: int = 16  # -1: no limit
    allow_consolidating_reclaim: bool = True
    k_value: float = 1.0
    compat: str | None = None  # "kai": reproduce KAI Scheduler exactly
    extra: dict[str, object] = field(default_factory=dict)  # keys other parts add

    @property
    def kai(self) -> bool:
        return self.compat == "kai"

    @property
    def fairshare_mode(self) -> str:
        return "kai" if self.kai else "exact"
