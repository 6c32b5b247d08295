"""Sharing a GPU through MPS survives stopping, cheating and faulting pods (skipped where
NVML finds no GPU or there is no MPS control daemon).

Runs `mps_survival.py` once (its storm has `GPUSHARE_STORM_CYCLES` cycles, 30 by default,
with the agent's default stop, signals alone, or the `--mps-stop` `GPUSHARE_MPS_STOP` names)
and checks what must hold whatever the timings. The rates (each neighbour back within 10 %
of its share within 5 s of a stop) are measured and written by the script, not asserted
here (no timing asserts in tests): docs/performance.md has them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_gpu_share import _gpu_present

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    if not _gpu_present():
        pytest.skip("NVML finds no GPU here")
    if shutil.which("nvidia-cuda-mps-control") is None:
        pytest.skip("no MPS control daemon on this machine")
    out = Path(os.environ.get("GPUSHARE_SURVIVAL_OUT") or tmp_path_factory.mktemp("survival"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]),
        PYTHONUNBUFFERED="1")
    subprocess.run(
        [sys.executable, str(ROOT / "tests/gpu/mps_survival.py"), "--out", str(out),
         "--cycles", os.environ.get("GPUSHARE_STORM_CYCLES", "30"),
         "--phases", os.environ.get("GPUSHARE_SURVIVAL_PHASES", "storm,cheat,fault"),
         "--mps-stop", os.environ.get("GPUSHARE_MPS_STOP", "signal")],
        env=env, check=True, timeout=1100)
    return json.loads((out / "mps_survival.json").read_text())


def test_stopping_pods_never_breaks_their_neighbours(results: dict) -> None:
    storm = results["storm"]
    assert "crashed" not in storm, storm
    assert storm["deaths"] == {}, storm["deaths"]
    assert all(s["replacement_ran"] for s in storm["stops"]), storm["stops"]
    assert storm["neighbour_checks"] > 0
    answers = results["terminate_client_answers"]
    if results["mps_stop"] == "signal":  # the default never asks the server to end a client
        assert answers == [], answers
    else:
        assert answers and all(a["ok"] for a in answers), answers


def test_a_cheating_pod_gets_no_more_than_its_share(results: dict) -> None:
    cheat = results["cheat"]
    assert "crashed" not in cheat, cheat
    honest, cheater = cheat["honest"], cheat["cheater"]
    assert cheater["env"]["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "100"
    # the server's limits: the memory the cheater sees and may take is the share's
    assert cheater["free_mib"] <= honest["free_mib"] + 512, cheat
    assert cheater["alloc"].startswith("failed"), cheat
    # same thread cap as the honest pod (not a timing: the same work under the same cap)
    assert cheater["median_rate"] <= honest["median_rate"] * 1.15, cheat


def test_a_pod_that_leaves_mps_is_evicted_by_the_compute_watchdog(results: dict) -> None:
    escaper = results["cheat"]["escaper"]
    assert "CUDA_MPS_PIPE_DIRECTORY" not in (escaper["env"] or {})
    assert escaper["phase"] == "Failed" and escaper["reason"] == "GPUComputeExceeded", escaper


def test_a_fault_is_found_blamed_and_recovered_from(results: dict) -> None:
    fault = results["fault"]
    assert "crashed" not in fault, fault
    assert fault["reports"], fault
    report = fault["reports"][0]
    assert report["gpu"] == 0
    assert set(report["affected"]) >= {"lab/near-0", "lab/near-1"}, report
    assert fault["recovered_after_s"] is not None, fault
