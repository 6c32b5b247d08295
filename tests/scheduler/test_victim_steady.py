"""Steady fair-share reclaim rules on hand-made figures (GPUs)."""

from __future__ import annotations

from fractions import Fraction as F

from gpushare.model import CPU, GPU, MEMORY
from gpushare.scheduler.plugins.proportion.resource_share import QueueShare
from gpushare.scheduler.plugins.proportion.steady import (
    SteadyShares,
    branch_surplus,
    may_reclaim,
    reclaimable,
)


def q(name, alloc, parent=None):
    return QueueShare(name=name, parent=parent,
                      allocated={GPU: F(alloc), CPU: F(0), MEMORY: F(0)})


def gpus(n):
    return {GPU: F(n), CPU: F(0), MEMORY: F(0)}


# Three weighted teams of 100 GPUs each (steady shares); B is idle.
STEADY = SteadyShares(steady={"a": F(100), "b": F(100), "c": F(100)},
                      keep={"a": F(100), "b": F(100), "c": F(100)})


def shares(a, c):
    return {"a": q("a", a), "b": q("b", 0), "c": q("c", c)}


def test_only_a_queue_below_what_it_keeps_may_reclaim_gpus():
    assert may_reclaim(STEADY, shares(180, 90), "c", gpus(16))
    assert not may_reclaim(STEADY, shares(180, 100), "c", gpus(1))
    assert not may_reclaim(STEADY, shares(180, 90), "c", gpus(0))  # CPU-only jobs: no


def test_victims_only_from_a_branch_above_what_it_keeps_and_within_its_surplus():
    # a keeps 100: at 180 it has 80 to spare, at 104 only 4 (an 8-GPU step is too big).
    assert branch_surplus(STEADY, shares(180, 90), "c", "a") == 80
    assert branch_surplus(STEADY, shares(100, 90), "c", "a") == 0
    assert branch_surplus(STEADY, shares(104, 90), "c", "a") == 4


def test_the_victim_is_never_taken_below_what_it_keeps():
    assert reclaimable(STEADY, shares(180, 90), "c", gpus(16), {"a": [gpus(16)]}, F(1))
    assert not reclaimable(STEADY, shares(110, 90), "c", gpus(16), {"a": [gpus(16)]}, F(1))


def test_overshoot_only_while_less_saturated_than_the_victim():
    # c ends at 106 (1.06) against a's 164 (1.64): fine; with a multiplier of 1.6 it is not.
    assert reclaimable(STEADY, shares(180, 90), "c", gpus(16), {"a": [gpus(16)]}, F(1))
    assert not reclaimable(STEADY, shares(180, 90), "c", gpus(16), {"a": [gpus(16)]}, F(16, 10))


def test_unlimited_quota_is_never_above_what_it_keeps():
    steady = SteadyShares(steady={"a": F(100), "c": F(100)}, keep={"a": None, "c": F(100)})
    s = {"a": q("a", 200), "c": q("c", 0)}
    assert branch_surplus(steady, s, "c", "a") == 0


def test_steady_share_counts_idle_weighted_queues_and_caps_by_limit():
    from gpushare.scheduler.cycle import open_session
    from gpushare.simulator import build_state, parse

    def queue(name, quota=0, weight=1, limit=-1):
        return {"name": name, "resources": {"gpu": {"quota": quota, "limit": limit,
                                                    "overQuotaWeight": weight}}}

    data = {
        "format": 1, "name": "s",
        "nodes": [{"name": "n0", "gpus": 30}],
        "queues": [queue("a"), queue("b"), queue("c", limit=6), queue("d", quota=-1),
                   queue("e", quota=2, weight=0)],
        "jobs": [{"name": "j", "queue": "a", "resources": {"gpus": 1},
                  "tasks": [{"state": "Running", "node": "n0"}]}],
    }
    sc = parse(data)
    session = open_session(build_state(sc), sc.config, 0.0)
    steady = session.proportion.reclaim_rules(steady=True, saturation_multiplier=F(1)).steady
    assert steady is not None
    # a, b and c share what is left by weight though only a runs anything; c's limit caps
    # what it may keep; d (unlimited quota) is never above; e keeps its quota.
    assert steady.steady["a"] == steady.steady["b"]
    assert steady.keep["c"] == 6
    assert steady.keep["d"] is None
    assert steady.keep["e"] == 2
    assert steady.steady["a"] > 1
