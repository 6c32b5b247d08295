"""The README's main job, `gpushare demo`, run as a user runs it; every step is then
checked against the API of the control plane it leaves running (`--keep`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from gpushare.tools import find_tool

KUBECTL = find_tool("kubectl") or "kubectl"  # the environment's kubectl wheel, else PATH
TEAMS = ("nlp", "vision", "recsys")


def _kubectl(kubeconfig, *args):
    done = subprocess.run([KUBECTL, "--kubeconfig", str(kubeconfig), *args, "-o", "json"],
                          capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout)


def test_demo_three_virtual_clusters_burst_then_reclaim_330m_each(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "gpushare.cli.main", "demo", "--data-dir", str(tmp_path),
         "--gpus", "1xL40S", "--timeout", "60", "--keep"],
        capture_output=True, text=True, timeout=300, check=False,
    )
    pid_file = tmp_path / "demo.pid"
    try:
        out = done.stdout + done.stderr
        assert done.returncode == 0, out
        # --keep says how to stop what it leaves running
        assert f"stop it with: kill -INT {pid_file.read_text()}" in out
        # A second demo aimed at the running one refuses at once and touches nothing.
        log = (tmp_path / "up.log").read_bytes()
        second = subprocess.run(
            [sys.executable, "-m", "gpushare.cli.main", "demo", "--data-dir", str(tmp_path),
             "--gpus", "1xL40S"], capture_output=True, text=True, timeout=60, check=False)
        assert second.returncode == 2 and "is in use by a running control plane" in \
            second.stderr and f"kill -INT {pid_file.read_text()}" in second.stderr
        assert (tmp_path / "admin.kubeconfig").exists()
        assert (tmp_path / "up.log").read_bytes()[:len(log)] == log
        # Declared GPUs: the GPU steps say they are skipped and no pod runs the matmul worker.
        assert "the GPU steps (a real matmul per team" in out and "skipped" in out
        admin = tmp_path / "admin.kubeconfig"
        for team in TEAMS:
            assert f"KUBECONFIG={tmp_path / 'tenants' / f'{team}.kubeconfig'} kubectl" in out
        # Step 1: a virtual cluster per team, each Ready, each pinned to its own queue.
        vcs = {v["metadata"]["name"]: v
               for v in _kubectl(admin, "get", "virtualclusters")["items"]}
        assert set(vcs) == set(TEAMS)
        for team, vc in vcs.items():
            assert vc["spec"]["queues"] == [team] and vc["status"]["phase"] == "Ready"
        # Step 2 happened: nlp burst past its share, which step 3 then reclaimed.
        evictions = _kubectl(admin, "get", "events", "-n", "vc-nlp", "--field-selector",
                             "reason=Evict")["items"]
        assert len(evictions) >= 2 and all("reclaim" in e["message"] for e in evictions)
        # Step 3: every team holds 330m of the one GPU.
        for team in TEAMS:
            status = _kubectl(admin, "get", "queue", team)["status"]
            assert status["allocated"]["nvidia.com/gpu"] == "330m", (team, status)
        host_pods = _kubectl(admin, "get", "pods", "-A")["items"]
        bound = [p for p in host_pods if p["spec"].get("nodeName")]
        assert len(bound) == 3 and len({p["spec"]["nodeName"] for p in bound}) == 1
        # Each pod on an address of its own in the node's pod network, none on the host's.
        ips = [p["status"].get("podIP") for p in bound]
        assert len(set(ips)) == 3 and all(ip and not ip.startswith("127.") for ip in ips), ips
        # Each team, with its own kubeconfig, sees exactly its own pods.
        for team in TEAMS:
            kubeconfig = tmp_path / "tenants" / f"{team}.kubeconfig"
            names = [p["metadata"]["name"] for p in _kubectl(kubeconfig, "get", "pods", "-A")[
                "items"] if not p["metadata"].get("deletionTimestamp")]
            assert names and all(n.startswith(f"{team}-train") for n in names), (team, names)
            running = [p for p in _kubectl(kubeconfig, "get", "pods")["items"]
                       if p["status"].get("phase") == "Running"]
            assert len(running) == 1, (team, [p["metadata"]["name"] for p in running])
            assert running[0]["status"].get("podIP") in ips, (team, running[0]["status"])
            queues = [q["metadata"]["name"]
                      for q in _kubectl(kubeconfig, "get", "queues")["items"]]
            assert queues == [team]
        vision = tmp_path / "tenants" / "vision.kubeconfig"
        logs = subprocess.run([KUBECTL, "--kubeconfig", str(vision), "logs", "vision-train"],
                              capture_output=True, text=True, timeout=60).stdout
        assert "vision step on GPU 0 portion 0.33" in logs
    finally:
        if pid_file.exists():
            pid = int(pid_file.read_text())
            os.kill(pid, signal.SIGINT)
            for _ in range(100):
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.2)
