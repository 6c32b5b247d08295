"""Queues: a tree of teams with per-resource quota, limit and over-quota weight."""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from gpushare.model.quantities import CPU, GPU, MEMORY, RESOURCES

UNLIMITED = Fraction(-1)


@dataclass(frozen=True, slots=True)
class ResourceSpec:
    """One resource of a queue, in the resource's natural unit (GPUs, millicores, bytes).

    ``-1`` means unlimited for quota and limit. ``lending_limit``: at most this much of the
    queue's unused quota may be used by queues outside its subtree; the rest stays idle for
    it (None: all of it may be, the default; only with a finite quota, at most the quota).
    """

    quota: Fraction = Fraction(0)
    limit: Fraction = UNLIMITED
    over_quota_weight: Fraction = Fraction(1)
    lending_limit: Fraction | None = None

    @property
    def kept(self) -> Fraction | None:
        """The part of the quota never lent (quota − lending limit); None: no limit."""
        if self.lending_limit is None:
            return None
        return self.quota - self.lending_limit

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
    #: Seconds a gang of this queue waits before nodes are reserved for it (None: the
    #: scheduler config's ``reservation``; negative: never).
    reservation_after: float | None = None
    #: Per GPU type (:func:`~gpushare.model.gpu_products.gpu_type_name`): quota, limit and
    #: over-quota weight on that type's GPUs alone (no lending limit). Empty: none, and
    #: the queue's ``gpu`` figures are its only GPU rules. ``gpu`` still bounds the total.
    gpu_types: dict[str, ResourceSpec] = field(default_factory=dict)
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

    def kept_quota(self) -> dict[str, Fraction] | None:
        """Per resource with a lending limit, the part of the quota never lent
        (quota − lending limit); None when no resource has one."""
        kept = {r: s.kept for r, s in self.resources.items() if s.kept is not None}
        return kept or None


def root_quota_overcommit(root_quotas: dict[str, float], capacity_gpus: float) -> str | None:
    """Top-level queues whose GPU quotas together exceed the cluster's GPUs promise
    guarantees that cannot all be kept: the warning to give, or None. ``root_quotas``:
    each top-level queue's GPU quota (unlimited or none: left out or <= 0)."""
    promised = {name: q for name, q in root_quotas.items() if q > 0}
    total = sum(promised.values())
    if capacity_gpus <= 0 or total <= capacity_gpus + 1e-9:
        return None
    listed = ", ".join(f"{name} {q:g}" for name, q in sorted(promised.items()))
    return (f"top-level GPU quotas sum to {total:g} ({listed}) but the cluster has "
            f"{capacity_gpus:g} GPU(s): not every guarantee can be met at once")


def lending_limit_error(quota: float | Fraction, lending_limit: float | Fraction) -> str | None:
    """Why a ``lendingLimit`` does not go with its ``quota`` (None: it does): it must be at
    least 0 and at most the quota, and the quota must be finite (not -1)."""
    if lending_limit < 0:
        return f"must be at least 0, got {float(lending_limit):g}"
    if quota == UNLIMITED:
        return "needs a finite quota (quota is -1, unlimited, so nothing is ever kept idle)"
    if lending_limit > quota:
        return f"may not exceed quota ({float(quota):g}), got {float(lending_limit):g}"
    return None


def gpu_type_error(quota: float | Fraction, limit: float | Fraction,
                   weight: float | Fraction) -> tuple[str, str] | None:
    """Why one GPU type's figures do not go together (None: they do), as (field, why):
    quota and limit are -1 (unlimited) or at least 0, a finite limit is at least a finite
    quota, and the weight is at least 0."""
    for name, value in (("quota", quota), ("limit", limit)):
        if value < 0 and value != UNLIMITED:
            return name, f"must be -1 (unlimited) or at least 0, got {float(value):g}"
    if weight < 0:
        return "overQuotaWeight", f"must be at least 0, got {float(weight):g}"
    if limit != UNLIMITED and quota != UNLIMITED and limit < quota:
        return "limit", f"may not be below quota ({float(quota):g}), got {float(limit):g}"
    if limit != UNLIMITED and quota == UNLIMITED:
        return "limit", "must be -1 (unlimited) with an unlimited quota"
    return None
