"""The fair-share rules of reclaim: who may reclaim, from whom, and whether a set of
victims keeps every queue within bounds.

All functions read a frozen view of the queue shares (:mod:`.shares`) taken before the
job's search starts, so a simulated eviction never changes the verdict on the next one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from gpushare.model import RESOURCES
from gpushare.model.quantities import Quantities, add, sub
from gpushare.model.queue import UNLIMITED
from gpushare.scheduler.plugins.proportion.resource_share import (
    ZERO,
    QueueShare,
    Shares,
    less_equal,
    leveled,
    path_to,
)


@dataclass(frozen=True, slots=True)
class Reclaimer:
    queue: str
    preemptible: bool
    request: Quantities  # the gang step it is placing now


def can_reclaim(shares: Shares, reclaimer: Reclaimer) -> bool:
    """A queue may reclaim only while the step keeps it within its fair share."""
    leaf = shares[reclaimer.queue]
    if not less_equal(add(leaf.allocated, reclaimer.request), leaf.fair_share):
        return False
    if reclaimer.preemptible:
        return True
    return less_equal(add(leaf.allocated_np, reclaimer.request), leaf.deserved)


def within_quota_if_non_preemptible(shares: Shares, reclaimer: Reclaimer) -> bool:
    """A non-preemptible reclaimer stays within quota on its queue and every ancestor."""
    if reclaimer.preemptible:
        return True
    return all(
        less_equal(add(queue.allocated_np, reclaimer.request), queue.deserved)
        for queue in path_to(shares, reclaimer.queue)
    )


def _fits_deserved(queue_allocated: Quantities, deserved: Quantities, request: Quantities) -> bool:
    return less_equal(add(queue_allocated, request), deserved)


def victim_queue_allowed(shares: Shares, reclaimer: Reclaimer, victim_queue: str) -> bool:
    """Cheap pre-filter: could any strategy take from this queue at all?"""
    mine, theirs = leveled(shares, reclaimer.queue, victim_queue)
    if not _fits_deserved(mine.allocated, mine.deserved, reclaimer.request):
        return not less_equal(theirs.allocated, theirs.allocatable_share())
    under = False
    for r in RESOURCES:
        if reclaimer.request.get(r, ZERO) <= 0:
            continue
        deserved = theirs.deserved[r]
        if deserved == UNLIMITED:
            continue
        if theirs.allocated[r] > deserved:
            return True
        if theirs.allocated[r] < deserved:
            under = True
    return not under


def maintain_fair_share(
    mine: QueueShare, theirs: QueueShare, remaining: Quantities, request: Quantities
) -> bool:
    """KAI's MaintainFairShare: the victim's branch still holds more than it may keep
    (its allocatable share: fair share or quota, capped by the limit) in some resource."""
    return not less_equal(remaining, theirs.allocatable_share())


def guarantee_deserved_quota(
    mine: QueueShare, theirs: QueueShare, remaining: Quantities, request: Quantities
) -> bool:
    """KAI's GuaranteeDeservedQuota: the reclaimer's branch is taking back its guaranteed
    quota (it stays within it with the request) from a branch still above its quota."""
    return _fits_deserved(mine.allocated, mine.deserved, request) and not less_equal(
        remaining, theirs.deserved
    )


#: The reclaim strategies, in KAI's order: a victim may go when one of them allows it.
RECLAIM_STRATEGIES = (maintain_fair_share, guarantee_deserved_quota)


def _strategy_allows(
    shares: Shares, reclaimer: Reclaimer, mine_name: str, theirs_name: str, remaining: Quantities
) -> bool:
    mine, theirs = shares[mine_name], shares[theirs_name]
    return any(strategy(mine, theirs, remaining, reclaimer.request)
               for strategy in RECLAIM_STRATEGIES)


def _ratio(allocated: Fraction, fair: Fraction) -> Fraction | float:
    if fair == UNLIMITED:
        return Fraction(0)
    if fair == 0:
        return float("inf") if allocated > 0 else Fraction(0)
    return allocated / fair


def _involved(units: Sequence[Mapping[str, Fraction]]) -> set[str]:
    return {r for unit in units for r in RESOURCES if unit.get(r, ZERO) > 0}


def reclaimable(
    shares: Shares,
    reclaimer: Reclaimer,
    victims_by_queue: Mapping[str, Sequence[Quantities]],
    multiplier: Fraction = Fraction(1),
) -> bool:
    """Whether taking these victims (per leaf queue: elastic pods one by one, a job's core
    as one unit) keeps to the reclaim strategies and overtakes no sibling."""
    remaining: dict[str, Quantities] = {}
    involved: dict[str, set[str]] = {}
    for victim_queue in sorted(victims_by_queue):
        units = victims_by_queue[victim_queue]
        mine, theirs = leveled(shares, reclaimer.queue, victim_queue)
        involved.setdefault(victim_queue, set()).update(_involved(units))
        if theirs.name not in remaining:
            remaining[theirs.name] = dict(theirs.allocated)
        for unit in units:
            left = remaining[theirs.name]
            if not _strategy_allows(shares, reclaimer, mine.name, theirs.name, left):
                return False
            for queue in reversed(path_to(shares, victim_queue)):
                if queue.name not in remaining:
                    remaining[queue.name] = dict(queue.allocated)
                remaining[queue.name] = sub(remaining[queue.name], unit)
                involved.setdefault(queue.name, set()).update(involved[victim_queue])
    return _within_bounds(shares, reclaimer, remaining, involved, multiplier)


def _within_bounds(
    shares: Shares,
    reclaimer: Reclaimer,
    remaining: Mapping[str, Quantities],
    involved: Mapping[str, set[str]],
    multiplier: Fraction,
) -> bool:
    mine_involved = {r for r in RESOURCES if reclaimer.request.get(r, ZERO) > 0}
    for queue in reversed(path_to(shares, reclaimer.queue)):
        after = add(remaining.get(queue.name, queue.allocated), reclaimer.request)
        for sibling_name in sorted(remaining):
            sibling = shares[sibling_name]
            if sibling.parent != queue.parent or sibling.name == queue.name:
                continue
            resources = involved.get(sibling_name, set()) | mine_involved
            for r in sorted(resources):
                mine_fair, their_fair = queue.fair_share[r], sibling.fair_share[r]
                if mine_fair == UNLIMITED and their_fair == UNLIMITED:
                    continue
                mine_ratio = _ratio(after[r], mine_fair)
                their_ratio = _ratio(remaining[sibling_name][r], their_fair)
                if mine_ratio > 1 and their_fair > 0 and mine_ratio * multiplier >= their_ratio:
                    return False
        if not reclaimer.preemptible and not less_equal(
            add(queue.allocated_np, reclaimer.request), queue.deserved
        ):
            return False
    return True
