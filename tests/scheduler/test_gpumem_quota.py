"""A `gpu-memory` request is checked against limits and non-preemptible quota with the
figure its queue is then charged: its two-decimal portion of the GPU it lands on, on each
device (default mode; `compat: kai` keeps KAI's figures)."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st
from scheduler_builders import cluster, queue

from gpushare.model import GpuRequest, Job, Node, Pod
from gpushare.scheduler import Config, run_cycle

ALLOCATE = Config(actions=("allocate",))
KAI = Config(actions=("allocate",), compat="kai")


def _state(memories: list[int], quota: str, request_mib: int, devices: int,
           preemptible: bool = False, limit: str = "-1"):
    state = cluster(nodes=0)
    for i, mib in enumerate(memories):
        state.upsert_node(Node(f"n{i}", gpus=2, gpu_memory_mib=mib))
    state.upsert_queue(queue("q", gpu_quota=quota, gpu_limit=limit))
    job = Job("infer", "default", "q", priority=125, preemptible=preemptible)
    state.upsert_job(job)
    state.upsert_pod(Pod("infer-0", "default", job.key, 0,
                         gpu=GpuRequest(memory_mib=request_mib, devices=devices)))
    return state


def _charge(request_mib: int, devices: int, gpu_mib: int) -> Fraction:
    return Fraction(GpuRequest(memory_mib=request_mib).portion_on(gpu_mib) * devices, 1000)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from([10000, 16000, 24000, 40000, 80000]), min_size=1, max_size=3),
       st.integers(1, 100), st.integers(500, 30000), st.integers(1, 2))
def test_a_non_preemptible_pod_lands_where_its_charge_fits_the_quota(
        memories, quota_hundredths, request_mib, devices) -> None:
    quota = Fraction(quota_hundredths, 100)
    state = _state(memories, str(quota), request_mib, devices)
    result = run_cycle(state, ALLOCATE, 0)
    fits = {f"n{i}" for i, mib in enumerate(memories)
            if request_mib <= mib and _charge(request_mib, devices, mib) <= quota}
    if not fits:
        assert result.binds == []
        return
    assert len(result.binds) == 1
    bind = result.binds[0]
    assert bind.node in fits
    assert Fraction(bind.portion_milli * len(bind.gpu_indices), 1000) <= quota


def test_the_small_gpu_is_refused_for_what_it_would_charge_not_the_large_gpus_figure() -> None:
    # 8000 MiB: 0.2 of a 40000 MiB GPU but 0.8 of a 10000 MiB one; quota 0.5.
    state = _state([10000], "0.5", 8000, 1)
    state.upsert_node(Node("z-big", gpus=1, gpu_memory_mib=40000))
    assert [b.node for b in run_cycle(state, ALLOCATE, 0).binds] == ["z-big"]
    alone = _state([10000], "0.5", 8000, 1)
    result = run_cycle(alone, ALLOCATE, 0)
    assert result.binds == []


def test_a_limit_is_checked_with_the_charge_on_every_device() -> None:
    # Preemptible, limit 0.9: 4000 MiB of a 10000 MiB GPU is 0.4, on two devices 0.8.
    ok = _state([10000], "0", 4000, 2, preemptible=True, limit="0.9")
    assert len(run_cycle(ok, ALLOCATE, 0).binds) == 1
    over = _state([10000], "0", 5000, 2, preemptible=True, limit="0.9")
    assert run_cycle(over, ALLOCATE, 0).binds == []


def test_compat_kai_counts_one_device_in_the_node_check() -> None:
    # 5000 MiB on two devices: 0.5 x 2 on n0's 10000 MiB GPUs, 0.25 x 2 on n1's 20000.
    # The default refuses n0 (1.0 > quota 0.9); KAI's predicate counts one device (0.5)
    # and takes n0, first by name.
    state = _state([10000, 20000], "0.9", 5000, 2)
    assert run_cycle(state, ALLOCATE, 0).binds[0].node == "n1"
    kai = _state([10000, 20000], "0.9", 5000, 2)
    assert run_cycle(kai, KAI, 0).binds[0].node == "n0"
