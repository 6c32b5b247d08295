"""A pod whose bind keeps failing sits out a growing number of cycles, so that it does
not take the same place every cycle while the pods behind it starve."""

from __future__ import annotations

from dataclasses import replace

from scheduler_builders import add_job, cluster, queue

from gpushare.model import PodStatus
from gpushare.scheduler import Config, run_cycle
from gpushare.scheduler.bind_backoff import MAX_SKIPPED_CYCLES, BindBackoff, skipped_cycles

ALLOCATE = Config(actions=("allocate",))


def test_skipped_cycles_grow_exponentially_after_the_first_failure_and_are_capped() -> None:
    assert [skipped_cycles(n) for n in range(1, 9)] == [0, 1, 2, 4, 8, 16, 32, 64]
    assert skipped_cycles(200) == MAX_SKIPPED_CYCLES
    assert skipped_cycles(0) == 0


def test_a_held_pod_comes_back_after_its_cycles_and_forget_clears_it() -> None:
    backoff = BindBackoff()
    backoff.next_cycle()  # cycle 1
    backoff.bind_failed("ns/p")
    backoff.bind_failed("ns/p")  # second failure: sit out one cycle
    assert backoff.next_cycle() == {"ns/p"} and backoff.is_held("ns/p")  # cycle 2
    assert backoff.next_cycle() == {"ns/p"} and not backoff.is_held("ns/p")  # cycle 3
    backoff.bind_failed("ns/p")  # third: two cycles
    backoff.next_cycle()
    backoff.forget("ns/p")
    assert backoff.next_cycle() == {"ns/p"} and not backoff.is_held("ns/p")


def _fail_bind(state, key: str) -> None:
    """What the shell does when the binder reports a failed bind: pending again."""
    state.bind_backoff.bind_failed(key)
    state.upsert_pod(replace(state.pods[key], status=PodStatus.PENDING, node=None,
                             gpu_indices=(), portion=0))


def test_a_pod_whose_bind_always_fails_stops_starving_the_others() -> None:
    # One GPU. "stuck" (inference, first in every order) is rejected by the binder every
    # time; forty training pods wait behind it, each finishing within the cycle after
    # it is bound.
    state = cluster(gpus=1)
    state.upsert_queue(queue("q", gpu_quota=1))
    add_job(state, "stuck", "q", whole=1, priority=125)
    for i in range(40):
        add_job(state, f"train{i:02d}", "q", whole=1, priority=50, created_at=float(i))
    tried: list[int] = []
    others = 0
    reasons: dict[int, str] = {}
    for cycle in range(1, 41):
        result = run_cycle(state, ALLOCATE, 0)
        assert len(result.binds) == 1
        key = result.binds[0].pod
        if key == "default/stuck-0":
            tried.append(cycle)
            _fail_bind(state, key)
        else:
            others += 1
            reasons[cycle] = result.pending_reasons.get("default/stuck", "")
            state.remove_pod(key)  # bound, ran, finished
    # Tried, then sits out 0, 1, 2, 4, 8, 16 cycles after each further failure.
    assert tried == [1, 2, 4, 7, 12, 21, 38]
    assert others == 40 - len(tried)
    assert reasons[3].startswith("BindBackOff: binding pod stuck-0 failed 2 time(s)")


def test_a_successful_bind_clears_the_failures() -> None:
    state = cluster(gpus=1)
    state.upsert_queue(queue("q", gpu_quota=1))
    add_job(state, "flaky", "q", whole=1)
    for _ in range(3):
        run_cycle(state, ALLOCATE, 0)
        _fail_bind(state, "default/flaky-0")
    state.bind_backoff.forget("default/flaky-0")  # the watch saw it bound at last
    assert [b.pod for b in run_cycle(state, ALLOCATE, 0).binds] == ["default/flaky-0"]


def test_compat_kai_retries_the_pod_every_cycle() -> None:
    state = cluster(gpus=1)
    state.upsert_queue(queue("q", gpu_quota=1))
    add_job(state, "stuck", "q", whole=1)
    kai = Config(actions=("allocate",), compat="kai")
    for _ in range(6):
        assert [b.pod for b in run_cycle(state, kai, 0).binds] == ["default/stuck-0"]
        _fail_bind(state, "default/stuck-0")
