"""The fair-share rules of reclaim, on hand-made queue figures (GPU only)."""

from __future__ import annotations

from fractions import Fraction as F

from gpushare.model import CPU, GPU, MEMORY
from gpushare.scheduler.plugins.proportion.reclaimable import (
    Reclaimer,
    can_reclaim,
    reclaimable,
    victim_queue_allowed,
)
from gpushare.scheduler.plugins.proportion.resource_share import UNLIMITED, QueueShare


def q(name, parent=None, deserved=0, fair=0, alloc=0, alloc_np=0, priority=100, limit=-1):
    def vec(g):
        return {GPU: F(g), CPU: F(0), MEMORY: F(0)}

    return QueueShare(
        name=name, parent=parent, priority=priority, deserved=vec(deserved),
        limit={GPU: F(limit), CPU: UNLIMITED, MEMORY: UNLIMITED},
        fair_share=vec(fair), allocated=vec(alloc), allocated_np=vec(alloc_np),
    )


def gpus(n):
    return {GPU: F(n), CPU: F(0), MEMORY: F(0)}


def shares(*queues):
    return {x.name: x for x in queues}


def test_reclaimer_must_stay_within_its_fair_share():
    s = shares(q("a", deserved=1, fair=2, alloc=1), q("b", deserved=1, fair=2, alloc=3))
    assert can_reclaim(s, Reclaimer("a", True, gpus(1)))
    assert not can_reclaim(s, Reclaimer("a", True, gpus(2)))


def test_non_preemptible_reclaimer_must_stay_within_quota():
    s = shares(q("a", deserved=1, fair=3, alloc=0, alloc_np=1), q("b", deserved=1, fair=1, alloc=3))
    assert can_reclaim(s, Reclaimer("a", True, gpus(1)))
    assert not can_reclaim(s, Reclaimer("a", False, gpus(1)))


def test_queue_at_its_quota_and_fair_share_is_never_a_victim():
    s = shares(q("a", deserved=2, fair=2, alloc=0), q("b", deserved=2, fair=2, alloc=2))
    assert not reclaimable(s, Reclaimer("a", True, gpus(1)), {"b": [gpus(1)]})


def test_victim_above_fair_share_can_lose_even_to_a_reclaimer_over_quota():
    # Maintain fair share: b holds 7 of a fair 4; a is above its quota 1 but below fair 4.
    s = shares(q("a", deserved=1, fair=4, alloc=1), q("b", deserved=1, fair=4, alloc=7))
    assert reclaimable(s, Reclaimer("a", True, gpus(1)), {"b": [gpus(1)]})


def test_reclaimer_within_quota_takes_from_a_victim_over_quota_below_fair_share():
    # Guarantee deserved quota: b is over its quota 2 but under its fair share 6.
    s = shares(q("a", deserved=2, fair=2, alloc=0), q("b", deserved=2, fair=6, alloc=4))
    assert reclaimable(s, Reclaimer("a", True, gpus(2)), {"b": [gpus(2)]})
    # ... but not once a is past its quota.
    s2 = shares(q("a", deserved=2, fair=4, alloc=2), q("b", deserved=2, fair=6, alloc=4))
    assert not reclaimable(s2, Reclaimer("a", True, gpus(2)), {"b": [gpus(2)]})


def test_each_victim_is_checked_before_it_is_taken():
    # b is 1 above its share: one 1-GPU victim is fine, a second one is not.
    s = shares(q("a", deserved=2, fair=2, alloc=0), q("b", deserved=2, fair=2, alloc=3))
    assert reclaimable(s, Reclaimer("a", True, gpus(1)), {"b": [gpus(1)]})
    assert not reclaimable(s, Reclaimer("a", True, gpus(2)), {"b": [gpus(1), gpus(1)]})


def test_cousins_are_compared_at_the_level_where_they_split():
    # Leaves a (under d0) and b (under d1); b's leaf is far over its own share, but its
    # department d1 is within its share: nothing may be taken.
    s = shares(
        q("d0", deserved=1, fair=2, alloc=1), q("d1", deserved=1, fair=2, alloc=2),
        q("a", "d0", deserved=1, fair=2, alloc=1), q("b", "d1", deserved=0, fair=0, alloc=2),
    )
    assert not reclaimable(s, Reclaimer("a", True, gpus(1)), {"b": [gpus(1)]})
    s["d1"] = q("d1", deserved=1, fair=2, alloc=3)
    assert reclaimable(s, Reclaimer("a", True, gpus(1)), {"b": [gpus(1)]})


def test_unlimited_quota_protects_the_victim():
    s = shares(q("a", deserved=2, fair=2, alloc=0), q("b", deserved=-1, fair=2, alloc=4))
    assert not reclaimable(s, Reclaimer("a", True, gpus(2)), {"b": [gpus(2)]})


def test_reclaimer_over_fair_share_must_not_overtake_its_sibling():
    # After the transfer a would be at 5/4 and b at 4/3: a stays less saturated, fine with
    # multiplier 1; a multiplier of 1.1 makes 1.25 * 1.1 >= 1.33 and refuses.
    s = shares(q("a", deserved=0, fair=4, alloc=4), q("b", deserved=0, fair=3, alloc=5))
    reclaimer = Reclaimer("a", True, gpus(1))
    assert reclaimable(s, reclaimer, {"b": [gpus(1)]}, F(1))
    assert not reclaimable(s, reclaimer, {"b": [gpus(1)]}, F(11, 10))


def test_victim_prefilter_follows_the_strategies():
    s = shares(q("a", deserved=1, fair=4, alloc=1), q("b", deserved=1, fair=4, alloc=3),
               q("c", deserved=1, fair=4, alloc=7))
    # a is past its quota: only queues above their allocatable share qualify.
    assert not victim_queue_allowed(s, Reclaimer("a", True, gpus(1)), "b")
    assert victim_queue_allowed(s, Reclaimer("a", True, gpus(1)), "c")
