import pytest
from scheduler_builders import add_job, cluster, queue

from gpushare.model import PodStatus
from gpushare.scheduler.state import StateError


def make():
    state = cluster(gpus=2)
    state.upsert_queue(queue("root", gpu_quota=-1))
    state.upsert_queue(queue("team", "root", gpu_quota=1))
    return state


def test_running_totals_follow_pods():
    state = make()
    add_job(state, "run", "team", whole=1, status=PodStatus.RUNNING, node="node0")
    add_job(state, "wait", "team", whole=1)
    usage = state.usage["node0"]
    assert usage.gpu_used == [1000, 0]
    assert state.queue_usage["team"].allocated.gpu == 1000
    assert state.queue_usage["root"].allocated.gpu == 1000
    assert state.queue_usage["team"].pending.gpu == 1000


def test_rollback_restores_every_total():
    state = make()
    add_job(state, "run", "team", whole=1, status=PodStatus.RUNNING, node="node0")
    job = add_job(state, "wait", "team", whole=1)
    pod = state.job_pods(job)[0]
    before = (list(state.usage["node0"].gpu_used), state.queue_usage["root"].allocated)
    stmt = state.statement()
    cp = stmt.checkpoint()
    stmt.allocate(pod, "node0", (1,), 1000)
    victim = state.pods["default/run-0"]
    stmt.evict(victim, "test", "preempt")
    assert victim.status is PodStatus.RELEASING
    assert state.usage["node0"].gpu_rel == [1000, 0]
    stmt.rollback(cp)
    assert pod.status is PodStatus.PENDING and victim.status is PodStatus.RUNNING
    assert (state.usage["node0"].gpu_used, state.queue_usage["root"].allocated) == before
    stmt.discard()


def test_evicting_a_pod_placed_this_cycle_returns_it_to_pending():
    state = make()
    job = add_job(state, "wait", "team", whole=1)
    pod = state.job_pods(job)[0]
    state.begin_cycle()
    stmt = state.statement()
    stmt.allocate(pod, "node0", (0,), 1000)
    stmt.evict(pod, "moved", "consolidation")
    stmt.commit()
    assert pod.status is PodStatus.PENDING and pod.node is None


def test_only_one_statement_at_a_time():
    state = make()
    state.statement()
    with pytest.raises(StateError):
        state.statement()


def test_pipelined_pods_wait_for_releasing_capacity():
    state = make()
    add_job(state, "old", "team", pods=1, whole=2, status=PodStatus.RELEASING, node="node0")
    usage = state.usage["node0"]
    assert usage.whole_gpus_free() == ([], [0, 1])
    job = add_job(state, "new", "team", whole=1)
    stmt = state.statement()
    stmt.pipeline(state.job_pods(job)[0], "node0", (0,), 1000)
    stmt.commit()
    assert usage.gpu_free_future(0) == 0 and usage.gpu_free_future(1) == 1000
    assert usage.gpu_free_now(1) == 0


def test_unknown_queue_is_rejected():
    state = make()
    with pytest.raises(StateError):
        add_job(state, "x", "nope")
