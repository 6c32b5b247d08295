"""Queue shares as the reclaim rules see them: per resource, in natural units.

Values are exact fractions; ``-1`` (:data:`UNLIMITED`) is unlimited for deserved, limit and
fair share.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from gpushare.model import RESOURCES
from gpushare.model.quantities import Quantities, zeros
from gpushare.model.queue import UNLIMITED

ZERO = Fraction(0)



def compare(value: Fraction, other: Fraction) -> int:
    """Three-way comparison where ``-1`` is larger than any finite value."""
    if value == UNLIMITED:
        return 0 if other == UNLIMITED else 1
    if other == UNLIMITED:
        return -1
    return (value > other) - (value < other)


def less_equal(values: Mapping[str, Fraction], other: Mapping[str, Fraction]) -> bool:
    return all(compare(values.get(r, ZERO), other.get(r, ZERO)) <= 0 for r in RESOURCES)


def allocatable(deserved: Fraction, limit: Fraction, fair_share: Fraction) -> Fraction:
    """What a queue may hold of one resource before it counts as over its share: the
    larger of quota and fair share, capped by the limit (the limit alone for an
    unlimited quota). The one rule read by the session's queue order and by the
    reclaim rules."""
    if deserved == UNLIMITED:
        return limit
    value = max(deserved, fair_share)
    if limit != UNLIMITED:
        value = min(limit, value)
    return value


@dataclass(slots=True)
class QueueShare:
    name: str
    parent: str | None
    priority: int = 100
    created_at: float = 0.0  # smaller is older
    deserved: Quantities = field(default_factory=zeros)
    limit: Quantities = field(default_factory=lambda: {r: UNLIMITED for r in RESOURCES})
    fair_share: Quantities = field(default_factory=zeros)
    allocated: Quantities = field(default_factory=zeros)
    allocated_np: Quantities = field(default_factory=zeros)  # of non-preemptible jobs
    #: Figures derived from the fields above, filled on first use (the fields are never
    #: changed once a share is read; ``replace`` starts a fresh one).
    derived: dict[str, object] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )

    def allocatable(self, resource: str) -> Fraction:
        """What the queue may hold before it counts as over its share."""
        cached = self.derived.get("allocatable")
        if cached is None:
            cached = self.derived["allocatable"] = {r: self._allocatable(r) for r in RESOURCES}
        value: Fraction = cached[resource]  # type: ignore[index]
        return value

    def _allocatable(self, resource: str) -> Fraction:
        return allocatable(self.deserved[resource], self.limit[resource],
                           self.fair_share[resource])

    def allocatable_share(self) -> Quantities:
        return {r: self.allocatable(r) for r in RESOURCES}


Shares = Mapping[str, QueueShare]


def path_to(shares: Shares, name: str) -> list[QueueShare]:
    """Queues from the top level down to ``name``."""
    path: list[QueueShare] = []
    seen: set[str] = set()
    current: str | None = name
    while current is not None and current in shares and current not in seen:
        seen.add(current)
        path.append(shares[current])
        current = shares[current].parent
    path.reverse()
    return path


def leveled(shares: Shares, reclaimer: str, victim: str) -> tuple[QueueShare, QueueShare]:
    """The two queues where the reclaimer's and the victim's branches split."""
    a = path_to(shares, reclaimer)
    b = path_to(shares, victim)
    left, right = a[0], b[0]
    for i in range(min(len(a), len(b))):
        left, right = a[i], b[i]
        if left.name != right.name:
            break
    return left, right
