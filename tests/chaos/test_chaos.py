"""The fault run, CI-sized: one seeded trial of `chaos_run.py` (the long run is
`bench/chaos_bench.py`), plus the checks it relies on, each shown to catch what it is for."""

from __future__ import annotations

import subprocess
import time
from fractions import Fraction
from pathlib import Path

from chaos_run import (
    MARK,
    ChaosRun,
    PodProcess,
    booked_overcommit,
    overcommitted,
    pod_processes,
)


def test_kill_9_of_server_controllers_and_agent_loses_nothing_and_overcommits_nothing(
        tmp_path: Path) -> None:
    result = ChaosRun(tmp_path, seed=3, seconds=25, kill_every=(1.5, 3.0)).run()
    print(result.summary())
    assert not result.violations, "\n".join(result.violations)
    # the run did what it claims: each component killed, writes made, pods placed
    assert set(result.kills) == {"apiserver", "controllers", "agent"}, result.kills
    assert result.writes >= 40
    assert result.running >= 2
    assert result.samples >= 100 and result.booking_checks >= 20


def _proc(pod: str, uid: str, gpu: str, portion: str) -> PodProcess:
    return PodProcess(1, pod, uid, (gpu,), Fraction(portion))


def test_process_check_finds_a_gpu_held_past_one() -> None:
    fits = [_proc("a", "u1", "GPU-0", "0.5"), _proc("b", "u2", "GPU-0", "0.5"),
            _proc("c", "u3", "GPU-1", "1")]
    assert overcommitted(fits) == {}
    over = [*fits, _proc("d", "u4", "GPU-1", "0.25")]
    assert overcommitted(over) == {"GPU-1": [("c", "1"), ("d", "1/4")]}


def _bound(name: str, index: str, portion: str, **meta: str) -> dict:
    return {"metadata": {"name": name, "annotations": {
        "gpushare.io/gpu-indices": index, "gpushare.io/gpu-portion": portion}, **meta},
        "spec": {"nodeName": "n"}, "status": {"phase": "Running"}}


def test_booking_check_counts_bound_pods_not_being_deleted() -> None:
    pods = {"a": _bound("a", "0", "0.5"), "b": _bound("b", "0", "0.5")}
    assert booked_overcommit(pods) == {}
    # a victim being deleted frees its slot for the pod bound in its place
    pods["victim"] = _bound("victim", "0", "0.5", deletionTimestamp="2026-01-01T00:00:00Z")
    assert booked_overcommit(pods) == {}
    pods["c"] = _bound("c", "0", "0.25")
    assert set(booked_overcommit(pods)) == {"n/0"}


def test_process_table_reader_sees_only_this_trials_marked_processes() -> None:
    env = {MARK: "trial-x", "CHAOS_POD": "p1", "CHAOS_UID": "uid-1",
           "NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b", "GPU_PORTION": "0.5"}
    ours = subprocess.Popen(["sleep", "30"], env=env)
    other = subprocess.Popen(["sleep", "30"], env={**env, MARK: "trial-y"})
    try:
        deadline = time.monotonic() + 10
        seen: list[PodProcess] = []
        while time.monotonic() < deadline and not seen:
            seen = pod_processes("trial-x")
            time.sleep(0.05)
        assert seen == [PodProcess(ours.pid, "p1", "uid-1", ("GPU-a", "GPU-b"),
                                   Fraction(1, 2))]
    finally:
        for p in (ours, other):
            p.kill()
            p.wait()
