"""Queues: a tree of teams with per-resource quota, limit and over-quota weight."""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from gpushare.model.quantities import CPU, GPU, MEMORY, RESOURCES

UNLIMITED = Fraction(-1)


@dataclass(frozen=True, slots=True)
class ResourceSpec:
    """One resource of a queue, in the resource's natural unit (GPUs, millicores, bytes).

    ``-1`` means unlimited for quota and limit.
    """

    quota: Fraction = Fraction(0)
    limit: Fraction = UNLIMITED
    over_quota_weight: Fraction = Fraction(1)

    @property
    def unlimited_limit(self) -> bool:
        return self.limit == UNLIMITED


@dataclass(slots=True)
class Queue:
    name: str
    parent: str | None = None
    priority: int = 100
    resources: dict[str, ResourceSpec] = field(
        default_factory=lambda: {r: ResourceSpec() for r in RESOURCES}
    )
    preempt_min_runtime: float = 0.0
    reclaim_min_runtime: float = 0.0
    created_at: float = 0.0  # seconds on the caller's clock; smaller is older
    usage: dict[str, float] = field(default_factory=dict)  # normalised past usage per resource
    # Filled by the cluster state: names of child queues, in name order.
    children: list[str] = field(default_factory=list)

    def spec(self, resource: str) -> ResourceSpec:
        return self.resources[resource]

    @property
    def gpu(self) -> ResourceSpec:
        return self.resources[GPU]

    @property
    def cpu(self) -> ResourceSpec:
        return self.resources[CPU]

    @property
    def memory(self) -> ResourceSpec:
        return self.resources[MEMORY]

    def is_leaf(self) -> bool:
        return not self.children
