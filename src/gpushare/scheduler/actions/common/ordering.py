"""Queue order with victims, and the victim order that reverses it.

Sibling queues are compared on, in turn: not over fair share first; under deserved quota
(with the job's next step) first; higher priority first; no use of a resource the queue
has no share of first; lower dominant-resource share (with the job added and any victims
removed) first; lower dominant share as it is; a Pareto-smaller allocatable share first;
the older queue first. Victims are taken from the queue this order would serve last,
re-evaluated after every pick, and inside a queue from the job that job order would serve
last.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from gpushare.model import RESOURCES
from gpushare.model.quantities import Quantities, add, sub
from gpushare.model.queue import UNLIMITED
from gpushare.scheduler.plugins.proportion.resource_share import (
    ZERO,
    QueueShare,
    compare,
    less_equal,
)

NO_SHARE_PENALTY = 1000


def _over_fair_share(q: QueueShare) -> bool:
    return all(q.fair_share[r] < q.allocated[r] for r in RESOURCES)


def _over_fair_share_of(q: QueueShare) -> bool:
    cached = q.derived.get("over")
    if cached is None:
        cached = q.derived["over"] = _over_fair_share(q)
    return cached  # type: ignore[return-value]


def _with_job(q: QueueShare, job: Quantities | None) -> Quantities:
    """The queue's allocation with the job's request added (the allocation itself when
    there is no job: never changed in place by the comparison)."""
    return q.allocated if job is None else add(q.allocated, job)


def _dominant_share(
    q: QueueShare, allocated: Quantities, totals: Mapping[str, Fraction]
) -> Fraction:
    best = ZERO
    for r in RESOURCES:
        share = q.allocatable(r)
        if share == UNLIMITED:
            share = totals.get(r, ZERO)
        value = allocated[r] * NO_SHARE_PENALTY if share == 0 else allocated[r] / share
        best = max(best, value)
    return best


def _uses_unshared(q: QueueShare, allocated: Quantities) -> bool:
    return any(q.allocatable(r) == 0 and allocated[r] > 0 for r in RESOURCES)


@dataclass(frozen=True, slots=True)
class QueueSide:
    """One side of a queue comparison: what queue order reads of a queue with a job's
    request added and victims removed. Pure in its inputs, so it can be kept."""

    over: bool  # over its fair share in every resource
    within: bool  # within its deserved quota with the job
    unshared: bool  # uses a resource it has no share of, with the job
    dominant: Fraction  # dominant share with the job, without the victims
    dominant_now: Fraction  # dominant share as it is


def queue_side(
    q: QueueShare,
    totals: Mapping[str, Fraction],
    job: Quantities | None = None,
    victims: Quantities | None = None,
) -> QueueSide:
    with_job = _with_job(q, job)
    return QueueSide(
        over=_over_fair_share_of(q),
        within=less_equal(with_job, q.deserved),
        unshared=_uses_unshared(q, with_job),
        dominant=_dominant_share(q, with_job if victims is None else sub(with_job, victims),
                                 totals),
        dominant_now=_dominant_now(q, totals),
    )


def compare_sides(left: QueueShare, ls: QueueSide, right: QueueShare, rs: QueueSide) -> int:
    """-1 when ``left`` is served first, 1 when ``right`` is (criteria in order)."""
    if ls.over != rs.over:
        return 1 if ls.over else -1
    if ls.within != rs.within:
        return -1 if ls.within else 1
    if left.priority != right.priority:
        return -1 if left.priority > right.priority else 1
    if ls.unshared != rs.unshared:
        return 1 if ls.unshared else -1
    if ls.dominant != rs.dominant:
        return -1 if ls.dominant < rs.dominant else 1
    if ls.dominant_now != rs.dominant_now:
        return -1 if ls.dominant_now < rs.dominant_now else 1
    la, ra = left.allocatable_share(), right.allocatable_share()
    l_smaller = less_equal(la, ra) and any(compare(la[r], ra[r]) < 0 for r in RESOURCES)
    r_smaller = less_equal(ra, la) and any(compare(ra[r], la[r]) < 0 for r in RESOURCES)
    if l_smaller != r_smaller:
        return -1 if l_smaller else 1
    if left.created_at != right.created_at:
        return -1 if left.created_at < right.created_at else 1
    return -1 if left.name < right.name else 1


def queue_compare(
    left: QueueShare,
    right: QueueShare,
    totals: Mapping[str, Fraction],
    left_job: Quantities | None = None,
    right_job: Quantities | None = None,
    left_victims: Quantities | None = None,
    right_victims: Quantities | None = None,
) -> int:
    """-1 when ``left`` is served first, 1 when ``right`` is."""
    return compare_sides(
        left, queue_side(left, totals, left_job, left_victims),
        right, queue_side(right, totals, right_job, right_victims),
    )


def _dominant_now(q: QueueShare, totals: Mapping[str, Fraction]) -> Fraction:
    cached = q.derived.get("dominant_now")
    if cached is not None and cached[0] is totals:  # type: ignore[index]
        hit: Fraction = cached[1]  # type: ignore[index]
        return hit
    value = _dominant_share(q, q.allocated, totals)
    q.derived["dominant_now"] = (totals, value)
    return value


class CompareMemo:
    """Remembered queue comparisons, keyed by the identity of the compared figures and
    requests (all held here, so an identity is never reused while remembered; callers
    never change them in place)."""

    __slots__ = ("_seen", "_sides")

    def __len__(self) -> int:
        return len(self._seen) + len(self._sides)

    def __init__(self) -> None:
        self._sides: dict[tuple[int, int], tuple[QueueShare, Quantities, QueueSide]] = {}
        self._seen: dict[
            tuple[Any, ...], tuple[QueueShare, QueueShare, Quantities, Quantities, int]
        ] = {}

    def compare(
        self, left: QueueShare, right: QueueShare, totals: Mapping[str, Fraction],
        left_job: Quantities, right_job: Quantities,
    ) -> int:
        key = (id(left), id(right), id(left_job), id(right_job))
        hit = self._seen.get(key)
        if (
            hit is not None and hit[0] is left and hit[1] is right
            and hit[2] is left_job and hit[3] is right_job
        ):
            return hit[4]
        cmp = compare_sides(
            left, self._side(left, totals, left_job), right, self._side(right, totals, right_job)
        )
        self._seen[key] = (left, right, left_job, right_job, cmp)
        return cmp


    def _side(
        self, q: QueueShare, totals: Mapping[str, Fraction], job: Quantities
    ) -> QueueSide:
        key = (id(q), id(job))
        hit = self._sides.get(key)
        if hit is not None and hit[0] is q and hit[1] is job:
            return hit[2]
        side = queue_side(q, totals, job)
        self._sides[key] = (q, job, side)
        return side


def pick_fair(
    shares: Mapping[str, QueueShare],
    totals: Mapping[str, Fraction],
    best_by_leaf: Mapping[str, Quantities],
    compared: CompareMemo | None = None,
) -> str | None:
    """The leaf queue fair order serves next: walk from the roots, at each level the child
    queue order puts first (compared with each side's best job's request).

    ``compared`` keeps comparisons across calls: a comparison is reused only for the very same
    queue figures (the same objects, never changed in place) and the same requests.
    """
    useful: dict[str | None, list[str]] = {}
    for leaf in sorted(best_by_leaf):
        current: str | None = leaf
        while current is not None:
            parent = shares[current].parent if current in shares else None
            kids = useful.setdefault(parent, [])
            if current in kids:
                break
            kids.append(current)
            current = parent
    memo: dict[str, Quantities] = {}

    def request_of(name: str) -> Quantities:
        if name in best_by_leaf:
            return best_by_leaf[name]
        if name not in memo:
            memo[name] = request_of(choose(useful[name]))
        return memo[name]

    def choose(names: list[str]) -> str:
        best = names[0]
        for name in names[1:]:
            if compared is None:
                cmp = queue_compare(
                    shares[best], shares[name], totals,
                    left_job=request_of(best), right_job=request_of(name),
                )
            else:
                cmp = compared.compare(
                    shares[best], shares[name], totals, request_of(best), request_of(name)
                )
            if cmp > 0:
                best = name
        return best

    roots = sorted(useful.get(None, []))
    if not roots:
        return None
    name = choose(roots)
    while name not in best_by_leaf:
        name = choose(sorted(useful[name]))
    return name
