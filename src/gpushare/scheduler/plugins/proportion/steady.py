"""Steady fair-share reclaim: a second reclaim path for queues below their weighted share.

The fair share is capped by demand, so while some capacity is free — even capacity no
pending job can use (GPUs scattered over nodes, outside a job's node selector) — every
queue's fair share equals its demand, no queue is above it, and reclaim finds no victims:
a queue stops at its quota while another holds far more than its weighted part.

The **steady fair share** is the fair share every queue would get if each queue with an
over-quota weight (and a finite quota) asked for the whole cluster; other queues keep
their real demand. What a queue may *keep* on this path is the larger of its quota and
its steady share, capped by its limit (nothing is above an unlimited quota). GPUs only:
a plentiful resource must not decide who loses GPU jobs.

1. A reclaimer's step asks for GPUs and its queue (and its branch at the level where it
   meets the victim's) holds fewer GPUs than it may keep.
2. Victims come from branches that hold more than they may keep ...
3. ... and never below it (each victim's first step alone must fit the surplus; the
   total is checked on the found scenario).
4. A step larger than the reclaimer's gap may take it past what it keeps only while it
   stays less saturated (GPUs / steady share, times the saturation multiplier) than every
   branch it takes from.

A reclaim is accepted when either this path or the fair-share rules accept it. Each
reclaim on this path lowers the sum of allocated² / steady over the queues involved, so
reclaims cannot cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from gpushare.model.quantities import GPU, RESOURCES, Quantities, Vec, as_quantities
from gpushare.model.queue import UNLIMITED
from gpushare.scheduler.config import Config
from gpushare.scheduler.plugins.proportion.resource_division import ShareInput, divide
from gpushare.scheduler.plugins.proportion.resource_share import Shares, leveled
from gpushare.scheduler.state import ClusterState, DivisionMemo

ZERO = Fraction(0)


@dataclass(frozen=True, slots=True)
class SteadyShares:
    """GPU steady fair share and what each queue may keep on this path (None: unlimited)."""

    steady: dict[str, Fraction]
    keep: dict[str, Fraction | None]

    @staticmethod
    def of(state: ClusterState, config: Config, cluster: Vec, quota: Mapping[str, Vec],
           limit: Mapping[str, Vec], requested: Callable[[str], Vec],
           kept_quota: Callable[[str], dict[str, Fraction] | None] | None = None,
           ) -> SteadyShares:
        """The steady shares of the queues in ``state`` on a cluster of ``cluster``
        resources, each leaf asking for ``requested(name)`` (or, with an over-quota weight
        and a finite GPU quota, for every GPU); ``kept_quota``: a queue's kept quota under its
        lending limits (:class:`.resource_division.ShareInput`), None for none."""
        capacity = as_quantities(cluster)
        inputs: list[ShareInput] = []
        kept, made = state.kept.steady_inputs, {}
        for name, queue in sorted(state.queues.items()):
            leaf = queue.is_leaf()
            # Made again only when what it is made from changed (see ``Proportion``).
            source = (queue, leaf, tuple(queue.usage.items()), requested(name) if leaf else None,
                      capacity[GPU])
            hit = kept.get(name)
            if hit is not None and hit[0] == source:
                made[name] = hit
                inputs.append(hit[1])
                continue
            request: dict[str, Fraction] = {}
            if leaf:
                real = requested(name)
                request = as_quantities(real)
                if queue.gpu.over_quota_weight > 0 and quota[name][0] != UNLIMITED:
                    request[GPU] = capacity[GPU]
            inputs.append(ShareInput(
                name=name, parent=queue.parent, priority=queue.priority,
                created_at=queue.created_at,
                quota=as_quantities(quota[name]),
                limit=as_quantities(limit[name]),
                weight={r: queue.resources[r].over_quota_weight for r in RESOURCES},
                request=request,
                usage={r: Fraction(str(v)) for r, v in queue.usage.items()},
                kept=None if kept_quota is None else kept_quota(name),
            ))
            made[name] = (source, inputs[-1])
        state.kept.steady_inputs = made
        # Levels whose inputs did not change since the last cycle are reused (with every
        # weighted queue asking for the whole cluster, most of them never change).
        memo_out: DivisionMemo = {}
        shares = divide(
            capacity, inputs, config.k_value, config.fairshare_mode,
            memo=state.kept.steady_share_memo,
            memo_out=memo_out,
        )
        state.kept.steady_share_memo = memo_out
        steady = {name: s[GPU] for name, s in shares.items()}
        keep: dict[str, Fraction | None] = {}
        for name in state.queues:
            gpu_quota, gpu_limit = quota[name][0], limit[name][0]
            if gpu_quota == UNLIMITED:
                keep[name] = None
                continue
            value = max(gpu_quota, steady.get(name, ZERO))
            if gpu_limit != UNLIMITED:
                value = min(value, gpu_limit)
            keep[name] = value
        return SteadyShares(steady, keep)

    def below(self, name: str, allocated: Fraction) -> bool:
        keep = self.keep.get(name)
        return keep is None or allocated < keep

    def surplus(self, name: str, allocated: Fraction) -> Fraction:
        keep = self.keep.get(name)
        return ZERO if keep is None else allocated - keep


def may_reclaim(steady: SteadyShares, shares: Shares, queue: str, request: Quantities) -> bool:
    """Rule 1 on the reclaimer's own queue."""
    gpus = request.get(GPU, ZERO)
    return gpus > 0 and steady.below(queue, shares[queue].allocated[GPU])


def branch_surplus(
    steady: SteadyShares, shares: Shares, reclaimer_queue: str, victim_queue: str
) -> Fraction:
    """Rules 1-2 for a victim queue: the GPUs its branch holds above what it may keep,
    where the reclaimer's branch is below what it may keep (else zero: nothing to take).
    Rule 3 then admits a victim job whose first step's GPUs fit within this surplus."""
    mine, theirs = leveled(shares, reclaimer_queue, victim_queue)
    if not steady.below(mine.name, mine.allocated[GPU]):
        return ZERO
    surplus = steady.surplus(theirs.name, theirs.allocated[GPU])
    return surplus if surplus > 0 else ZERO


def reclaimable(
    steady: SteadyShares, shares: Shares, reclaimer_queue: str, request: Quantities,
    victims_by_queue: Mapping[str, Sequence[Quantities]], multiplier: Fraction,
) -> bool:
    """Whether the victims (per leaf queue) may be taken on the steady path."""
    gpus = request.get(GPU, ZERO)
    if not may_reclaim(steady, shares, reclaimer_queue, request):
        return False
    taken: dict[str, Fraction] = {}
    mine_names: set[str] = set()
    for victim_queue in sorted(victims_by_queue):
        mine, theirs = leveled(shares, reclaimer_queue, victim_queue)
        mine_names.add(mine.name)
        lost = sum((unit.get(GPU, ZERO) for unit in victims_by_queue[victim_queue]), ZERO)
        taken[theirs.name] = taken.get(theirs.name, ZERO) + lost
    for name, lost in taken.items():
        allocated = shares[name].allocated[GPU]
        if steady.surplus(name, allocated) <= 0 or steady.surplus(name, allocated - lost) < 0:
            return False
    for mine_name in sorted(mine_names):
        allocated = shares[mine_name].allocated[GPU]
        if not steady.below(mine_name, allocated):
            return False
        keep = steady.keep.get(mine_name)
        after = allocated + gpus
        if keep is None or after <= keep:
            continue
        mine_ratio = _ratio(after, steady.steady.get(mine_name, ZERO)) * multiplier
        for name, lost in taken.items():
            their_ratio = _ratio(shares[name].allocated[GPU] - lost, steady.steady.get(name, ZERO))
            if not mine_ratio < their_ratio:
                return False
    return True


def _ratio(allocated: Fraction, steady: Fraction) -> Fraction | float:
    if steady <= 0:
        return float("inf") if allocated > 0 else ZERO
    return allocated / steady
