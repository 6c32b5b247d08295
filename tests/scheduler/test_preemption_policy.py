"""A job whose PriorityClass says ``preemptionPolicy: Never`` evicts nothing to be placed
(default); ``compat: kai`` ignores the policy, as KAI does."""

from __future__ import annotations

from scheduler_builders import add_job, cluster, queue

from gpushare.model import PodStatus
from gpushare.scheduler import Config, run_cycle


def _state(never: bool):
    # One queue, a 2-GPU node full of a low-priority training job; an inference job
    # of higher priority asks for one GPU.
    state = cluster(gpus=2)
    state.upsert_queue(queue("q", gpu_quota=2))
    add_job(state, "train", "q", pods=2, whole=1, min_member=1, priority=50,
            status=PodStatus.RUNNING, node="node0")
    infer = add_job(state, "infer", "q", whole=1, priority=125)
    infer.may_preempt = not never
    return state


def test_preempt_runs_for_a_job_that_may_preempt():
    result = run_cycle(_state(never=False), Config(), 0)
    assert [e.action for e in result.evictions] == ["preempt"]


def test_a_job_that_never_preempts_waits_and_evicts_nothing():
    result = run_cycle(_state(never=True), Config(), 0)
    assert result.evictions == [] and result.binds == [] and result.pipelines == []


def test_compat_kai_ignores_the_policy():
    result = run_cycle(_state(never=True), Config(compat="kai"), 0)
    assert [e.action for e in result.evictions] == ["preempt"]


def test_a_job_that_never_preempts_still_takes_free_capacity():
    state = cluster(gpus=1)
    state.upsert_queue(queue("q", gpu_quota=1))
    add_job(state, "infer", "q", whole=1, priority=125).may_preempt = False
    assert [b.pod for b in run_cycle(state, Config(), 0).binds] == ["default/infer-0"]
