"""Two replicas of ``gpushare controllers --leader-elect``: one works, the other waits on
the Lease; killed, the leader is replaced within seconds, and no pod or GPU slot is
booked twice across the change."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from e2e_support import add_node, wait_for

QUEUE = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: team}
spec:
  resources:
    gpu: {quota: 1, limit: -1, overQuotaWeight: 1}
"""


def pods(prefix: str, count: int) -> str:
    return "".join(f"""---
apiVersion: v1
kind: Pod
metadata:
  name: {prefix}-{i}
  namespace: default
  labels: {{kai.scheduler/queue: team}}
  annotations: {{gpu-fraction: "0.25"}}
spec:
  schedulerName: gpushare
  containers:
  - {{name: main, image: busybox, command: ["sleep", "3600"]}}
""" for i in range(count))


def replica(kubeconfig: Path, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "gpushare.cli.main", "controllers", "--kubeconfig",
         str(kubeconfig), "--leader-elect", "--leader-elect-lease-duration", "2",
         "--leader-elect-renew-deadline", "1.5", "--leader-elect-retry-period", "0.3",
         "--metrics-interval", "0"],
        stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )


def test_two_replicas_one_leader_failover_without_double_binding(server, kubectl, tmp_path):
    add_node(server.kubeconfig, "box", "1xL40S")  # four 0.25 slots on one GPU
    kubectl.run("apply", "-f", "-", stdin=QUEUE)
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    first = replica(server.kubeconfig, logs[0])
    wait_for(lambda: "controllers running" in logs[0].read_text(), timeout=30,
             what="the first replica leading")
    second = replica(server.kubeconfig, logs[1])
    try:
        wait_for(lambda: "waiting for kube-system/gpushare-controllers" in logs[1].read_text(),
                 timeout=30, what="the second replica waiting")
        kubectl.run("apply", "-f", "-", stdin=pods("a", 2))
        wait_for(lambda: all(p["spec"].get("nodeName") for p in kubectl.json(
            "get", "pods")["items"]), what="the first pods bound")
        lease = kubectl.json("get", "lease", "-n", "kube-system", "gpushare-controllers")
        assert "controllers running" not in logs[1].read_text()  # only one works
        leader = lease["spec"]["holderIdentity"]

        first.send_signal(signal.SIGKILL)
        first.wait(10)
        killed_at = time.monotonic()
        wait_for(lambda: "controllers running" in logs[1].read_text(), timeout=30,
                 what="the second replica taking over")
        assert time.monotonic() - killed_at < 15
        lease = kubectl.json("get", "lease", "-n", "kube-system", "gpushare-controllers")
        assert lease["spec"]["holderIdentity"] != leader
        assert lease["spec"]["leaseTransitions"] >= 1

        kubectl.run("apply", "-f", "-", stdin=pods("b", 3))  # one more than the GPU holds
        def settled():
            items = kubectl.json("get", "pods")["items"]
            bound = [p for p in items if p["spec"].get("nodeName")]
            return bound if len(bound) == 4 else None

        bound = wait_for(settled, what="the GPU filled by the new leader")
        time.sleep(1.0)  # a double booking would show up as a fifth binding
        bound = [p for p in kubectl.json("get", "pods")["items"] if p["spec"].get("nodeName")]
        assert len(bound) == 4
        assert sum(float(p["metadata"]["annotations"]["gpushare.io/gpu-portion"])
                   for p in bound) == 1.0
        events = kubectl.json("get", "events", "--field-selector", "reason=FailedBinding")
        assert events["items"] == []
    finally:
        for proc in (first, second):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
