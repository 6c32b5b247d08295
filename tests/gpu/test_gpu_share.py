"""GPU share enforcement on a real GPU (skipped where NVML finds none).

Runs `share_experiment.py` briefly and checks what must hold whatever the timings: the pods
ran through the agent's supervisor, NVML memory was attributed to the right pods, a pod past
its share was stopped (MPS memory limit) or killed (watchdog), and the others finished.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]


def _gpu_present() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
        return count > 0
    except Exception:
        return False


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    if not _gpu_present():
        pytest.skip("NVML finds no GPU here")
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("gpu-share")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), PYTHONUNBUFFERED="1")
    subprocess.run(
        [sys.executable, str(ROOT / "tests/gpu/share_experiment.py"), "--out", str(out),
         "--seconds", "5", "--data-dir", str(out / "data")],
        env=env, check=True, timeout=900,
    )
    return json.loads((out / "gpu_share_results.json").read_text())


def test_whole_gpu_pod_runs_and_sees_its_gpu(results: dict) -> None:
    pod = results["phases"]["A_whole_gpu_alone"]["pods"]["whole"]
    assert pod["phase"] == "Succeeded"
    assert pod["env"]["CUDA_VISIBLE_DEVICES"] == "0"
    assert pod["result"]["tflops"] > 0


def test_watchdog_kills_the_pod_over_its_share_and_spares_the_other(results: dict) -> None:
    pods = results["phases"]["E_watchdog_over_share"]["pods"]
    assert pods["greedy"]["phase"] == "Failed"
    assert pods["greedy"]["reason"] == "GPUMemoryExceeded"
    assert pods["steady"]["phase"] == "Succeeded"


def test_torch_hook_caps_the_allocator_at_the_share(results: dict) -> None:
    pod = results["phases"]["F_torch_hook_over_share"]["pods"]["capped"]
    assert pod["result"]["torch_hook"] is True
    assert pod["phase"] == "Failed"
    assert pod["result"]["alloc"].startswith("failed")


def test_nvml_memory_is_attributed_to_the_right_pods(results: dict) -> None:
    if "C_three_thirds_mps" not in results["phases"]:
        pytest.skip("MPS is not usable here: " + "; ".join(results["enforcement_notes"]))
    pods = results["phases"]["C_three_thirds_mps"]["pods"]
    for i in range(3):
        pod = pods[f"third-{i}"]
        assert pod["phase"] == "Succeeded"
        assert pod["env"]["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "33"
        # each held 2, 4, 6 GiB on top of its matrices
        assert pod["nvml_peak"]["memoryMiB"] >= 2048 * (i + 1)


def test_mps_memory_limit_stops_the_pod_over_its_share(results: dict) -> None:
    if "D_mps_over_share" not in results["phases"]:
        pytest.skip("MPS is not usable here")
    pods = results["phases"]["D_mps_over_share"]["pods"]
    assert pods["too-big"]["phase"] == "Failed"
    assert pods["ok-0"]["phase"] == "Succeeded"
    assert pods["ok-1"]["phase"] == "Succeeded"
