"""What the reclaim action asks the share rules, for one run of it.

Two paths may allow a reclaim: KAI's fair-share rules (:mod:`.reclaimable`) and, outside
``compat: kai``, gpushare's steady path (:mod:`.steady`). :class:`ReclaimRules` composes
them, so the action only asks: may this reclaimer reclaim at all, may it take from this
branch (and how much on the steady path), does this set of victims keep to the rules,
does a consolidating reclaim disrupt within bounds. Every verdict reads a frozen view of
the queue shares (``shares``) the action took before the job's search.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from gpushare.model.quantities import GPU, RESOURCES, Quantities
from gpushare.scheduler.plugins.proportion import steady as steady_rules
from gpushare.scheduler.plugins.proportion.reclaimable import (
    Reclaimer,
    can_reclaim,
    reclaimable,
    victim_queue_allowed,
    within_quota_if_non_preemptible,
)
from gpushare.scheduler.plugins.proportion.resource_share import Shares
from gpushare.scheduler.plugins.proportion.steady import SteadyShares

ZERO = Fraction(0)


@dataclass(frozen=True, slots=True)
class ReclaimRules:
    """The reclaim rules of one run of the action (made by ``Proportion.reclaim_rules``).

    ``steady``: the steady shares when the steady path is on (None under KAI).
    ``multiplier``: the saturation multiplier both paths' sibling bound reads."""

    steady: SteadyShares | None
    multiplier: Fraction

    def paths(self, shares: Shares, reclaimer: Reclaimer) -> tuple[bool, bool]:
        """Whether the fair-share rules and the steady path may be used at all."""
        fair = can_reclaim(shares, reclaimer)
        steady = self.steady
        on_steady = (
            steady is not None
            and steady_rules.may_reclaim(steady, shares, reclaimer.queue, reclaimer.request)
            and within_quota_if_non_preemptible(shares, reclaimer)
        )
        return fair, on_steady

    def may_reclaim(self, shares: Shares, reclaimer: Reclaimer) -> bool:
        """KAI's CanReclaimResources: some path lets this reclaimer reclaim."""
        return any(self.paths(shares, reclaimer))

    def served_first(self, shares: Shares, reclaimer: Reclaimer) -> bool:
        """A reclaimer on the steady path (below what it may keep) gets what it frees
        before the victims' jobs, which would otherwise take it straight back."""
        return self.paths(shares, reclaimer)[1]

    def allows(self, shares: Shares, reclaimer: Reclaimer,
               units: Mapping[str, Sequence[Quantities]]) -> bool:
        """KAI's reclaim scenario validator: the fair-share rules, or else the steady
        path, allow taking ``units`` (per leaf queue: elastic pods one by one, a job's core
        as one unit)."""
        fair, on_steady = self.paths(shares, reclaimer)
        if fair and reclaimable(shares, reclaimer, units, self.multiplier):
            return True
        return bool(on_steady and self.steady is not None and steady_rules.reclaimable(
            self.steady, shares, reclaimer.queue, reclaimer.request, units, self.multiplier
        ))

    def branch(self, shares: Shares, reclaimer: Reclaimer, paths: tuple[bool, bool],
               victim_queue: str) -> tuple[bool, Fraction]:
        """For a victim queue's branch (with the reclaimer's ``paths``): whether the
        fair-share rules allow taking from it, and (else) the GPU surplus the steady path
        allows (a victim job whose first step fits within it may go)."""
        fair, on_steady = paths
        allowed = fair and victim_queue_allowed(shares, reclaimer, victim_queue)
        surplus = ZERO
        if not allowed and on_steady and self.steady is not None:
            surplus = steady_rules.branch_surplus(self.steady, shares, reclaimer.queue,
                                                  victim_queue)
        return allowed, surplus


def disruption_within(reclaimer: Reclaimer, disrupted: Quantities, ratio: Fraction) -> bool:
    """A consolidating reclaim (victims moved, not only evicted) may disrupt (``disrupted``:
    evicted or moved) at most ``ratio`` times what the reclaimer asks for: GPUs for a
    reclaimer that asks for GPUs, otherwise each resource it asks for.

    A reclaim that only evicts is bounded by the fair-share rules already; moving pods
    is what lets an over-served queue restart many times what it needs. The bound reads
    the scarce resource only: GPU pods differ widely in the CPU and memory that come with
    a GPU, and that must not decide whether a GPU reclaim may go ahead.
    """
    asked_gpu = reclaimer.request.get(GPU, ZERO)
    bounded = [GPU] if asked_gpu > 0 else [
        r for r in RESOURCES if reclaimer.request.get(r, ZERO) > 0
    ]
    return all(disrupted.get(r, ZERO) <= ratio * reclaimer.request.get(r, ZERO)
               for r in bounded)
