"""Division of capacity into fair shares, top-down through the queue tree, per resource.

Two modes:

* ``kai``: KAI Scheduler's arithmetic exactly. Every queue first gets
  ``min(quota, limit, request)``; what is left goes by priority bucket (highest first) in
  rounds proportional to the over-quota weight (adjusted by past usage with ``k``); each
  offer is floored to whole units (1 GPU, 1 millicore, 1 byte) and the fraction
  remembered; what a bucket floors away stays in the pot for the lower buckets' rounds.
  Only after the last bucket is the floored-away leftover handed out, bucket by bucket
  (highest first), at most one unit (or what remains) per remembered queue, by largest
  remembered fraction, then the older queue, then the smaller name.
* ``exact`` (gpushare's default): the same passes without flooring, so leftovers smaller
  than a unit are shared in proportion to weight (two bursting teams in a 1-GPU parent get
  0.5 / 0.5, not 0.67 / 0.33).

All arithmetic is on :class:`~fractions.Fraction`, in natural units: GPUs, millicores, bytes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Any

from gpushare.model.quantities import RESOURCES
from gpushare.model.queue import UNLIMITED

ZERO = Fraction(0)
ONE = Fraction(1)


@dataclass(slots=True)
class ShareInput:
    """One queue as the division sees it (natural units; -1 unlimited)."""

    name: str
    parent: str | None
    priority: int
    created_at: float
    quota: dict[str, Fraction]
    limit: dict[str, Fraction]
    weight: dict[str, Fraction]
    request: dict[str, Fraction] = field(default_factory=dict)  # leaves; parents are summed
    usage: dict[str, Fraction] = field(default_factory=dict)
    #: Per resource with a lending limit, the part of the quota never lent (quota −
    #: lending limit): the queue asks for at least this much, so the part of it that it
    #: does not use stays in its share, out of the other queues' over-quota division.
    #: None: no lending limit (the division is KAI's).
    kept: dict[str, Fraction] | None = None
    #: Per resource, the part of a division memo's key that comes from this input alone
    #: (made on first use; an input is never changed once made).
    memo_part: dict[str, tuple[Any, ...]] = field(default_factory=dict, compare=False,
                                                  repr=False)

    def key_part(self, r: str) -> tuple[Any, ...]:
        part = self.memo_part.get(r)
        if part is None:
            quota, limit, weight = self.quota[r], self.limit[r], self.weight[r]
            usage = self.usage.get(r, ZERO)
            part = (
                self.name, self.priority, self.created_at, quota.numerator, quota.denominator,
                limit.numerator, limit.denominator, weight.numerator, weight.denominator,
                usage.numerator, usage.denominator)
            if self.kept is not None and r in self.kept:
                part += _pair(self.kept[r])
            self.memo_part[r] = part
        return part


def _fraction(value: float | Fraction | int) -> Fraction:
    if isinstance(value, float):
        return Fraction(Decimal(repr(value)))
    return Fraction(value)


def _pair(x: Fraction) -> tuple[int, int]:
    return (x.numerator, x.denominator)


def divide(
    capacity: Mapping[str, Fraction],
    queues: Sequence[ShareInput],
    k_value: float = 1.0,
    mode: str = "exact",
    memo: Mapping[tuple[Any, ...], dict[str, Fraction]] | None = None,
    memo_out: dict[tuple[Any, ...], dict[str, Fraction]] | None = None,
) -> dict[str, dict[str, Fraction]]:
    """Fair share of every queue reachable from a root, per resource.

    Queues whose parent is unknown are dropped with their subtree (KAI does the same).
    ``memo`` holds the results of earlier divisions of single levels, keyed by everything
    they depend on; the levels worked out (or reused) here are written to ``memo_out``,
    so that a cycle re-divides only the branches whose figures changed.
    """
    by_name = {q.name: q for q in queues}
    children: dict[str | None, list[str]] = {}
    for q in sorted(queues, key=lambda q: q.name):
        parent = q.parent if q.parent in by_name else (None if q.parent is None else "\0orphan")
        children.setdefault(parent, []).append(q.name)

    request: dict[str, dict[str, Fraction]] = {}

    def total_request(name: str) -> dict[str, Fraction]:
        kids = children.get(name, [])
        if not kids:
            own = by_name[name].request
            req = {r: Fraction(own.get(r, ZERO)) for r in RESOURCES}
        else:
            req = {r: ZERO for r in RESOURCES}
            for kid in kids:
                sub = total_request(kid)
                for r in RESOURCES:
                    req[r] += sub[r]
        kept = by_name[name].kept
        if kept is not None:
            # The part of its quota a queue never lends counts as asked for: what of it is
            # unused stays idle for the queue (and counts in its parent's request).
            for r, amount in kept.items():
                if amount > req[r]:
                    req[r] = amount
        request[name] = req
        return req

    for root in children.get(None, []):
        total_request(root)

    k = _fraction(k_value)
    shares: dict[str, dict[str, Fraction]] = {}

    def level(total: Mapping[str, Fraction], names: list[str]) -> None:
        if not names:
            return
        members = [by_name[n] for n in names]
        result: dict[str, dict[str, Fraction]] = {n: {} for n in names}
        for r in RESOURCES:
            amount = Fraction(total.get(r, ZERO))
            key = None
            got = None
            if memo is not None or memo_out is not None:
                # Fractions as (numerator, denominator): a Fraction's hash costs a
                # modular inverse, and the key holds eight of them per queue.
                key = (mode, _pair(k), r, _pair(amount), tuple(
                    (q.key_part(r), request[q.name][r].numerator,
                     request[q.name][r].denominator) for q in members
                ))
                got = memo.get(key) if memo is not None else None
            if got is None:
                got = divide_resource(amount, members, r, request, k, mode)
            if memo_out is not None:
                memo_out[key] = got  # type: ignore[index]
            for n in names:
                result[n][r] = got[n]
        for n in names:
            shares[n] = result[n]
            level(result[n], children.get(n, []))

    level(capacity, children.get(None, []))
    return shares


def divide_resource(
    total: Fraction,
    queues: Sequence[ShareInput],
    resource: str,
    request: Mapping[str, Mapping[str, Fraction]],
    k: Fraction,
    mode: str,
) -> dict[str, Fraction]:
    """One level, one resource."""
    fair = {q.name: ZERO for q in queues}
    # What does not change within one division, worked out once per queue: its request,
    # its limit (None: unlimited) and what it can take (its request, capped by the limit).
    asked: dict[str, Fraction] = {}
    limits: dict[str, Fraction | None] = {}
    takes: dict[str, Fraction] = {}
    for q in queues:
        req = asked[q.name] = request[q.name][resource]
        limit = q.limit[resource]
        limits[q.name] = None if limit == UNLIMITED else limit
        takes[q.name] = req if limit == UNLIMITED else min(limit, req)

    def requestable(q: ShareInput) -> Fraction:
        return takes[q.name]

    def remaining_request(q: ShareInput) -> Fraction:
        rest = takes[q.name] - fair[q.name]
        return rest if rest > 0 else ZERO

    def satisfied(q: ShareInput) -> bool:
        got = fair[q.name]
        if asked[q.name] <= got:
            return True
        limit = limits[q.name]
        return limit is not None and limit <= got

    # Deserved pass: priority plays no role; over-committed quotas may exceed the total.
    remaining = total
    for q in queues:
        quota = q.quota[resource]
        deserved = total if quota == UNLIMITED else quota
        amount = min(deserved, requestable(q))
        fair[q.name] += amount
        remaining -= amount
    if remaining <= 0:
        return fair

    def share_weights(bucket: Sequence[ShareInput]) -> tuple[dict[str, Fraction], Fraction]:
        total_w = sum((q.weight[resource] for q in bucket if remaining_request(q) > 0), ZERO)
        if total_w == 0:
            return {}, ZERO
        weights: dict[str, Fraction] = {}
        for q in bucket:
            if satisfied(q):
                continue
            nw = q.weight[resource] / total_w
            usage = q.usage.get(resource, ZERO)
            weights[q.name] = max(ZERO, nw + k * (nw - usage))
        return weights, sum(weights.values(), ZERO)

    priorities = sorted({q.priority for q in queues}, reverse=True)
    if mode == "kai":
        return _kai_over_quota(remaining, priorities, queues, fair, share_weights,
                               remaining_request, satisfied, resource)
    for priority in priorities:
        if remaining <= 0:
            break
        bucket = [q for q in queues if q.priority == priority]
        remaining = _exact_rounds(remaining, bucket, fair, share_weights,
                                  remaining_request, satisfied, resource)
    return fair


Fair = dict[str, Fraction]
Weights = Callable[[Sequence[ShareInput]], tuple[dict[str, Fraction], Fraction]]
Rest = Callable[[ShareInput], Fraction]
Satisfied = Callable[[ShareInput], bool]


def _kai_over_quota(remaining: Fraction, priorities: list[int], queues: Sequence[ShareInput],
                    fair: Fair, share_weights: Weights, remaining_request: Rest,
                    satisfied: Satisfied, resource: str) -> Fair:
    """KAI's over-quota division: the rounds of every bucket first, then the leftovers.

    Each bucket (highest priority first) runs its rounds on what the buckets above left,
    flooring every offer and remembering what it floored away; that remainder stays in the
    pot for the lower buckets. Only when every bucket has had its rounds is the leftover
    handed out, again bucket by bucket from the highest: each remembered queue gets at most
    one unit (or what remains), by largest remembered fraction, then the older queue, then
    the smaller name.
    """
    remembered_by_bucket: list[dict[str, tuple[Fraction, float]]] = []
    for priority in priorities:
        bucket = [q for q in queues if q.priority == priority]
        if remaining <= 0:
            # KAI still enters the bucket; with nothing left no round gives anything.
            remembered_by_bucket.append({})
            continue
        remaining, remembered = _kai_rounds(remaining, bucket, fair, share_weights,
                                            remaining_request, satisfied, resource)
        remembered_by_bucket.append(remembered)
    for remembered in remembered_by_bucket:
        if remaining <= 0:
            break
        order = sorted(remembered, key=lambda n: (-remembered[n][0], remembered[n][1], n))
        for name in order:
            if remaining == 0:
                break
            give = min(ONE, remaining)
            fair[name] += give
            remaining -= give
    return fair


def _kai_rounds(remaining: Fraction, bucket: Sequence[ShareInput], fair: Fair,
                share_weights: Weights, remaining_request: Rest, satisfied: Satisfied,
                resource: str) -> tuple[Fraction, dict[str, tuple[Fraction, float]]]:
    remembered: dict[str, tuple[Fraction, float]] = {}
    while True:
        another = False
        round_total = remaining
        weights, weight_sum = share_weights(bucket)
        if weight_sum == 0:
            break
        for q in bucket:
            if remaining == 0:
                break
            if satisfied(q):
                continue
            requested = remaining_request(q)
            if q.weight[resource] == 0:
                continue
            offer = round_total * weights[q.name] / weight_sum
            if requested <= offer:
                give = requested
                remembered.pop(q.name, None)
            else:
                floored = Fraction(math.floor(offer))
                give = floored if floored > 0 else ZERO
                if offer - give > 0:
                    remembered[q.name] = (offer - give, q.created_at)
            if give == 0:
                continue
            fair[q.name] += give
            remaining -= give
            another = another or requested < offer
        if not another or remaining == 0:
            break
    return remaining, remembered


def _exact_rounds(remaining: Fraction, bucket: Sequence[ShareInput], fair: Fair,
                  share_weights: Weights, remaining_request: Rest, satisfied: Satisfied,
                  resource: str) -> Fraction:
    while remaining > 0:
        weights, weight_sum = share_weights(bucket)
        if weight_sum == 0:
            break
        round_total = remaining
        capped = False
        for q in bucket:
            if satisfied(q) or q.weight[resource] == 0 or weights.get(q.name, ZERO) == 0:
                continue
            requested = remaining_request(q)
            offer = round_total * weights[q.name] / weight_sum
            give = requested if requested <= offer else offer
            capped = capped or requested <= offer
            fair[q.name] += give
            remaining -= give
        if not capped:
            break
    return remaining
