"""The whole stack on a real GPU (skipped where NVML finds no GPU): API server, agent with
NVML and MPS, pods through the API; see `control_plane_experiment.py`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_gpu_share import _gpu_present

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    if not _gpu_present():
        pytest.skip("NVML finds no GPU here")
    pytest.importorskip("torch")
    pytest.importorskip("kubernetes")
    out = tmp_path_factory.mktemp("gpu-cp")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    subprocess.run(
        [sys.executable, str(ROOT / "tests/gpu/control_plane_experiment.py"), "--out", str(out),
         "--seconds", "5", "--data-dir", str(out / "data")],
        env=env, check=True, timeout=600,
    )
    return json.loads((out / "control_plane_results.json").read_text())


def test_node_reports_real_gpus_and_enforcement(results: dict) -> None:
    annotations = results["node"]["annotations"]
    assert "gpushare.io/gpus-declared" not in annotations
    assert "nvml-watchdog" in annotations["gpushare.io/enforcement"]
    assert int(results["node"]["capacity"]["nvidia.com/gpu"]) >= 1


def test_pods_share_the_gpu_and_the_greedy_one_fails(results: dict) -> None:
    pods = results["pods"]
    for i in range(3):
        assert pods[f"third-{i}"]["phase"] == "Succeeded"
        assert pods[f"third-{i}"]["tflops"] > 0
    assert pods["too-big"]["phase"] == "Failed"
    assert pods["too-big"]["reason"] != "GPUOvercommitted"  # stopped by its memory limit
    assert results["deleted"]


def test_agent_restarts_a_killed_mps_daemon(results: dict) -> None:
    if "mps" not in results["node"]["annotations"]["gpushare.io/enforcement"]:
        pytest.skip("MPS is not used on this node")
    assert results["mps_restart"]["restarted"] is True
