"""A job held back by ``Job.not_before`` (requeued after running past its maximum
runtime, or failed): the core places none of its pods before that time, says why, and
places them from then on; nothing changes for a job without it."""

from __future__ import annotations

import math

from scheduler_builders import add_job, cluster, queue

from gpushare.scheduler import Config, run_cycle


def _held(not_before: float | None):
    state = cluster(nodes=1, gpus=1)
    state.upsert_queue(queue("team", gpu_quota=1))
    job = add_job(state, "a", "team", whole=1)
    job.not_before = not_before
    state.upsert_job(job)
    return state


def test_a_requeued_job_is_not_placed_before_its_time_and_is_after() -> None:
    state = _held(1060.0)
    held = run_cycle(state, Config(), now=1059.0)
    assert held.binds == [] and held.evictions == []
    reason = held.pending_reasons["default/a"]
    assert reason.startswith("MaxRuntimeExceeded:") and "requeue delay" in reason
    placed = run_cycle(state, Config(), now=1060.0)
    assert [b.pod for b in placed.binds] == ["default/a-0"]


def test_a_failed_job_is_never_placed() -> None:
    state = _held(math.inf)
    result = run_cycle(state, Config(), now=1e12)
    assert result.binds == [] and "failed" in result.pending_reasons["default/a"]


def test_a_held_job_evicts_nothing_for_itself() -> None:
    state = cluster(nodes=1, gpus=1)
    state.upsert_queue(queue("low", gpu_quota=0))
    state.upsert_queue(queue("team", gpu_quota=1))
    add_job(state, "squatter", "low", whole=1)
    run_cycle(state, Config(), now=0.0)  # the squatter takes the GPU over quota
    job = add_job(state, "a", "team", whole=1)
    job.not_before = 100.0
    state.upsert_job(job)
    held = run_cycle(state, Config(), now=50.0)
    assert held.evictions == [] and held.binds == []
    reclaimed = run_cycle(state, Config(), now=100.0)
    assert [e.pod for e in reclaimed.evictions] == ["default/squatter-0"]


def test_without_a_hold_the_job_is_placed_at_once() -> None:
    state = _held(None)
    assert [b.pod for b in run_cycle(state, Config(), now=0.0).binds] == ["default/a-0"]
