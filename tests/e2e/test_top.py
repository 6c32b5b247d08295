"""`kubectl top pod|node` against the embedded control plane, from what a real `gpushare
agent` process measures of the pods it runs; the agent's figures on /metrics."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest
from e2e_support import wait_for
from metrics_support import Scraper, value

NODE = "top-node"
BUSY = ("import time\n"
        "block = bytearray(96 * 1024 * 1024)\n"
        "for i in range(0, len(block), 4096): block[i] = 1\n"
        "while True:\n"
        "    sum(range(20000)); time.sleep(0.002)\n")


@pytest.fixture
def agent(server, tmp_path) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpushare.cli.main", "agent", "--kubeconfig",
         str(server.kubeconfig), "--node-name", NODE, "--gpus", "1xL40S", "--data-dir",
         str(tmp_path / "agent"), "--heartbeat", "1", "--metrics-interval", "1"],
        stdout=(tmp_path / "agent.log").open("ab"), stderr=subprocess.STDOUT)
    yield proc
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


def _pod(name: str, script: str) -> str:
    return f"""
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default, labels: {{app: top-test}}}}
spec:
  nodeName: {NODE}
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: python
    command: [{json.dumps(sys.executable)}, "-c", {json.dumps(script)}]
"""


def _mi(text: str) -> float:
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi)", text)
    assert m, text
    return int(m.group(1)) * {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024}[m.group(2)]


def _millicores(text: str) -> int:
    m = re.fullmatch(r"(\d+)m", text)
    assert m, text
    return int(m.group(1))


def test_kubectl_top_shows_what_the_agent_measures(server, agent, kubectl):
    wait_for(lambda: kubectl.run("get", "node", NODE, check=False).returncode == 0,
             what="the agent's node")
    kubectl.run("apply", "-f", "-", stdin=_pod("busy", BUSY))
    kubectl.run("apply", "-f", "-", stdin=_pod("idle", "import time; time.sleep(3600)"))
    wait_for(lambda: kubectl.json("get", "pod", "busy")["status"].get("phase") == "Running"
             and kubectl.json("get", "pod", "idle")["status"].get("phase") == "Running",
             what="pods running")

    # Discovery says metrics.k8s.io is served (kubectl top checks before asking).
    groups = json.loads(kubectl.run("get", "--raw", "/apis").stdout)["groups"]
    assert any(g["name"] == "metrics.k8s.io" for g in groups)

    def top_pods():
        done = kubectl.run("top", "pod", "-n", "default", "--no-headers", check=False)
        if done.returncode != 0:
            return None
        rows = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines()}
        busy = rows.get("busy")
        if not busy or "idle" not in rows or _mi(busy[1]) < 90:
            return None
        return rows if _millicores(busy[0]) > 20 else None

    rows = wait_for(top_pods, timeout=60, what="kubectl top pod with both pods")
    assert _mi(rows["busy"][1]) >= 96  # the 96 MiB it touched, plus the interpreter
    assert _mi(rows["idle"][1]) < _mi(rows["busy"][1]) - 64
    assert _millicores(rows["idle"][0]) < _millicores(rows["busy"][0])

    # A label selector is applied to the pods themselves.
    done = kubectl.run("top", "pod", "-l", "app=nothing", "--no-headers", check=False)
    assert "busy" not in done.stdout

    done = kubectl.run("top", "node", "--no-headers")
    (line,) = [x for x in done.stdout.splitlines() if x.split()[0] == NODE]
    cpu, cpu_pct, mem, mem_pct = line.split()[1:5]
    assert mem_pct.endswith("%")
    assert _millicores(cpu) > 0 and cpu_pct.endswith("%") and _mi(mem) > 96

    # The agent's own figures reach the control plane's /metrics.
    scraper = Scraper(server.kubeconfig)

    def agent_figures():
        s = scraper.samples()
        return s if value(s, "gpushare_node_pods_running", node=NODE) == 2 else None

    samples = wait_for(agent_figures, what="the agent's figures on /metrics")
    assert value(samples, "gpushare_node_enforcement_info", node=NODE,
                 backend="none (declared GPUs)") == 1
    mib = int(kubectl.json("get", "node", NODE)["metadata"]["labels"]["nvidia.com/gpu.memory"])
    assert value(samples, "gpushare_gpu_memory_total_bytes", node=NODE,
                 gpu="0") == mib * 1024 * 1024
    assert value(samples, "gpushare_watchdog_kills_total", node=NODE) == 0
    mem_busy = value(samples, "gpushare_pod_memory_working_set_bytes", namespace="default",
                     pod="busy")
    assert mem_busy is not None and mem_busy > 90 * 1024 * 1024
