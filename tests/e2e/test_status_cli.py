"""`gpushare status` (rich tables, one screen) and `--json` on the read-only CLI views,
after the three-team pattern on the real control plane."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from e2e_support import add_node, wait_for

EXAMPLES = Path(__file__).resolve().parents[2] / "src/gpushare/examples/three_teams"
TEAMS = ("nlp", "vision", "recsys")


def _gpushare(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpushare.cli.main", *args,
                           "--kubeconfig", str(kubeconfig)], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "COLUMNS": "160"})


def test_status_shows_queues_gpus_and_pending_reasons(server, controllers, kubectl):
    add_node(server.kubeconfig, "gpu-node-1", "1xL40S")
    for name in ("queues", "nlp-burst", "vision", "recsys"):
        kubectl.run("apply", "-f", str(EXAMPLES / f"{name}.yaml"))

    def settled():
        done = _gpushare(server.kubeconfig, "status", "--json")
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        queues = {q["name"]: q for q in report["queues"]}
        if not all(queues.get(t, {}).get("gpuAllocated") == 0.33 for t in TEAMS):
            return None
        if len(report["pending"]) != 2 or any(
                p["reason"] == "not decided yet" for p in report["pending"]):
            return None
        return report

    report = wait_for(settled, timeout=60, what="status at 330m per team, two pending")
    queues = {q["name"]: q for q in report["queues"]}
    assert queues["nlp"]["parent"] == "ml-org" and queues["nlp"]["depth"] == 1
    assert queues["nlp"]["gpuQuota"] == 0.33
    (gpu,) = report["gpus"]
    assert gpu["node"] == "gpu-node-1" and gpu["gpu"] == 0
    assert sorted(s["queue"] for s in gpu["slices"]) == sorted(TEAMS)
    assert gpu["free"] == 0.01
    assert {p["queue"] for p in report["pending"]} == {"nlp"}
    assert all("limit" in p["reason"] for p in report["pending"]), report["pending"]

    screen = _gpushare(server.kubeconfig, "status")
    assert screen.returncode == 0, screen.stderr
    out = screen.stdout
    for needle in ("Queues", "GPUs", "Pending", "nlp", "vision", "recsys", "330m",
                   "gpu-node-1", report["pending"][0]["pod"]):
        assert needle in out, f"{needle!r} missing from\n{out}"
    assert len(out.splitlines()) < 50, "one screen"

    listed = _gpushare(server.kubeconfig, "queue", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert {q["name"]: q["gpuAllocated"] for q in json.loads(listed.stdout)}["vision"] == 0.33


def test_version_json():
    done = subprocess.run([sys.executable, "-m", "gpushare.cli.main", "version", "--json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert set(json.loads(done.stdout)) == {"version"}
