"""The stale-gang pass looks only at jobs that changed or are stale, and still sees every
gang that breaks."""

from __future__ import annotations

from scheduler_builders import add_job, cluster, queue

from gpushare.model import PodStatus
from gpushare.scheduler import Config, run_cycle

STALE_ONLY = Config(actions=("stalegangeviction",), staleness_grace_seconds=0)


def _gang_state():
    state = cluster(nodes=1, gpus=4)
    state.upsert_queue(queue("q", gpu_quota=4))
    add_job(state, "gang", "q", pods=2, whole=1, status=PodStatus.RUNNING, node="node0")
    add_job(state, "solo", "q", pods=1, whole=1, status=PodStatus.RUNNING, node="node0")
    return state


def test_after_a_pass_only_stale_jobs_stay_watched():
    state = _gang_state()
    assert state.stale_watch == {"default/gang", "default/solo"}
    run_cycle(state, STALE_ONLY, 0.0)
    assert state.stale_watch == set()


def test_a_gang_broken_between_cycles_is_evicted():
    state = _gang_state()
    run_cycle(state, STALE_ONLY, 0.0)
    state.set_pod(state.pods["default/gang-1"], PodStatus.FAILED)
    assert state.stale_watch == {"default/gang"}
    result = run_cycle(state, STALE_ONLY, 10.0)
    assert [e.pod for e in result.evictions] == ["default/gang-0"]


def test_a_gang_broken_by_a_larger_minimum_is_noticed():
    state = _gang_state()
    run_cycle(state, STALE_ONLY, 0.0)
    solo = state.jobs["default/solo"]
    solo.min_member = 2
    state.upsert_job(solo)
    result = run_cycle(state, STALE_ONLY, 10.0)
    assert [e.pod for e in result.evictions] == ["default/solo-0"]


def test_a_stale_job_inside_its_grace_is_looked_at_again():
    state = _gang_state()
    state.set_pod(state.pods["default/gang-1"], PodStatus.FAILED)
    config = Config(actions=("stalegangeviction",), staleness_grace_seconds=60)
    first = run_cycle(state, config, 0.0)
    assert first.evictions == [] and first.stale_since["default/gang"] == 0.0
    assert state.stale_watch == {"default/gang"}
    later = run_cycle(state, config, 61.0)
    assert [e.pod for e in later.evictions] == ["default/gang-0"]
