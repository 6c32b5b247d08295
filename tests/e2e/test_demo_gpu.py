"""The demo's GPU steps: the pure parts (the Node's enforcement, the worker manifests, the
rate lines, the judgement of shares and of the over-share pod) on any machine; the whole demo
on a real GPU (marked `gpu`, skipped where NVML finds no GPU)."""

from __future__ import annotations

import subprocess
import sys
from importlib import resources

import pytest
import yaml

from gpushare.cli.demo import _nvml_gpu_count
from gpushare.cli.demo_gpu import (
    gpu_manifest,
    judge_shares,
    kept_rate,
    parse_rates,
    real_enforcement,
    recent_rate,
    shares,
    stopped_by_enforcement,
)
from gpushare.tools import find_tool

EXAMPLES = resources.files("gpushare.examples") / "three_teams"
LOG = ("vision step on GPU GPU-1234 portion 0.33\nrate 101.5 TFLOP/s\nrate 99.0 TFLOP/s\n"
       "warning: rate 5 TFLOP/s inside a sentence\nrate 100 TFLOP/s\nrate 98.25 TFLOP/s\n")


def _node(annotations: dict[str, str]) -> dict:
    return {"metadata": {"name": "n", "annotations": annotations}}


def test_enforcement_is_read_from_the_node_and_declared_gpus_have_none() -> None:
    assert real_enforcement(_node({"gpushare.io/enforcement": "mps,nvml-watchdog"})) == \
        "mps,nvml-watchdog"
    assert real_enforcement(_node({"gpushare.io/enforcement": "nvml-watchdog"})) == \
        "nvml-watchdog"
    assert real_enforcement(_node({"gpushare.io/enforcement": "none (declared GPUs)"})) is None
    assert real_enforcement(_node({"gpushare.io/enforcement": "mps",
                                   "gpushare.io/gpus-declared": "1xL40S"})) is None
    assert real_enforcement(_node({})) is None
    assert real_enforcement({}) is None


def test_rate_lines_are_parsed_in_order_and_only_whole_lines_count() -> None:
    assert parse_rates(LOG) == [101.5, 99.0, 100.0, 98.25]
    assert recent_rate(LOG) == 99.0  # median of 99.0, 100, 98.25
    assert recent_rate("rate 1.0 TFLOP/s\n") is None
    assert parse_rates("no rates here") == []


def test_shares_are_judged_against_the_quotas() -> None:
    quotas = {"nlp": 0.33, "vision": 0.33, "recsys": 0.33}
    even = {"nlp": 250.0, "vision": 240.0, "recsys": 260.0}
    assert shares(even)["vision"] == pytest.approx(0.32)
    assert judge_shares(even, quotas) == []
    skewed = {"nlp": 600.0, "vision": 100.0, "recsys": 100.0}
    problems = judge_shares(skewed, quotas)
    assert [p.split(":")[0] for p in problems] == ["nlp", "recsys", "vision"]
    assert "measured share 0.75" in problems[0]
    assert judge_shares({"nlp": 1.0}, quotas)  # a team without a rate is a problem
    assert judge_shares({t: 0.0 for t in quotas}, quotas)  # no work at all is too


def test_kept_rate_needs_most_of_the_rate_before() -> None:
    assert kept_rate(100.0, 95.0)
    assert kept_rate(100.0, 130.0)
    assert not kept_rate(100.0, 50.0)
    assert not kept_rate(0.0, 10.0)


def test_over_share_pod_is_stopped_only_by_the_enforcement() -> None:
    running = {"status": {"phase": "Running"}}
    assert stopped_by_enforcement(running, "allocated 86000 MiB") is None
    killed = {"status": {"phase": "Failed", "reason": "GPUMemoryExceeded",
                         "message": "86000 MiB > share 47000 MiB"}}
    assert "NVML watchdog" in stopped_by_enforcement(killed, "allocated 86000 MiB")
    oom = {"status": {"phase": "Failed", "containerStatuses": [
        {"state": {"terminated": {"exitCode": 3, "reason": "Error"}}}]}}
    log = "vision step on GPU 0 portion 0.33\nallocation of 86000 MiB failed: CUDA out of memory\n"
    assert "MPS memory limit" in stopped_by_enforcement(oom, log)
    assert stopped_by_enforcement(oom, "Traceback: something else broke") is None


def test_gpu_manifests_run_the_worker_and_keep_everything_else() -> None:
    for name, team in (("nlp-burst.yaml", "nlp"), ("vision.yaml", "vision"),
                       ("recsys.yaml", "recsys"), ("vision-greedy.yaml", "vision")):
        source = yaml.safe_load((EXAMPLES / name).read_text())
        out = yaml.safe_load(gpu_manifest((EXAMPLES / name).read_text(), "/py", "/w.py", team,
                                          ("--alloc-mib", "10")))
        spec = out["spec"]["template"]["spec"] if out["kind"] == "Job" else out["spec"]
        assert spec["containers"][0]["command"] == ["/py", "/w.py", team, "--alloc-mib", "10"]
        assert "args" not in spec["containers"][0]
        assert out["metadata"] == source["metadata"]
    assert (EXAMPLES / "matmul.py").is_file()


def test_worker_reports_its_team_before_it_needs_torch(tmp_path) -> None:
    """The worker's first line names the team, GPU and portion, then it needs torch (CUDA)."""
    done = subprocess.run([sys.executable, str(EXAMPLES / "matmul.py"), "nlp"],
                          capture_output=True, text=True, timeout=120,
                          env={"CUDA_VISIBLE_DEVICES": "GPU-x", "GPU_PORTION": "0.33",
                               "PATH": "/usr/bin:/bin", "PYTHONNOUSERSITE": "1"},
                          check=False)
    assert done.stdout.splitlines()[0] == "nlp step on GPU GPU-x portion 0.33"


@pytest.mark.gpu
@pytest.mark.timeout(600)
def test_demo_on_a_real_gpu_measures_shares_and_stops_the_over_share_pod(tmp_path) -> None:
    if not _nvml_gpu_count():
        pytest.skip("NVML finds no GPU here")
    assert find_tool("kubectl"), "the demo needs kubectl"
    done = subprocess.run([sys.executable, "-m", "gpushare.cli.main", "demo", "--data-dir",
                           str(tmp_path), "--timeout", "90"],
                          capture_output=True, text=True, timeout=560, check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "enforcement in force" in out and "nvml-watchdog" in out
    assert "vision-greedy stopped by the enforcement" in out
    assert "nlp and recsys kept their rate" in out
