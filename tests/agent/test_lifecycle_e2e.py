"""The node's stop with a real `gpushare agent` process: the preStop hook runs inside the
pod's own grace period, and the pods it stopped start again with the next agent at once,
not as a crash (no CrashLoopBackOff, even with a long back-off)."""

from __future__ import annotations

import signal
from pathlib import Path

from test_agent_e2e import NS, wait_for
from test_pod_limits_e2e import LimitsCluster

from gpushare.kube.client import PODS


def test_a_stopped_node_runs_pre_stop_and_its_pods_restart_without_back_off(
        tmp_path: Path) -> None:
    c = LimitsCluster(tmp_path)
    c.node = "lifecycle-node"
    try:
        c.start_agent_with("--restart-backoff", "600")
        c.create_raw({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "svc", "namespace": NS},
            "spec": {"nodeName": c.node, "restartPolicy": "Always",
                     "terminationGracePeriodSeconds": 3,
                     "containers": [{
                         "name": "main", "image": "busybox",
                         "command": ["/bin/sh", "-c",
                                     "trap 'echo got-term >> events' TERM; "
                                     "while true; do sleep 0.2; done"],
                         "lifecycle": {"preStop": {"exec": {"command": [
                             "/bin/sh", "-c", "echo pre-stop >> events"]}}}}]}})
        c.wait_phase("svc", "Running", timeout=30)
        directory = c.root / "agent" / "pods" / NS / "svc"
        c.kill_agent(signal.SIGTERM)  # a node going down
        events = (directory / "events").read_text().split()
        assert events[:2] == ["pre-stop", "got-term"]  # the hook first, then SIGTERM
        c.start_agent_with("--restart-backoff", "600")

        def running_again() -> bool:
            pod = c.kube.get(PODS.item("svc", NS)) or {}
            statuses = (pod.get("status") or {}).get("containerStatuses") or []
            return bool(statuses) and statuses[0]["restartCount"] == 1 and \
                "running" in statuses[0]["state"]

        wait_for(running_again, 40)
        state = c.pod("svc")["status"]["containerStatuses"][0]
        assert state["lastState"]["terminated"]["exitCode"] in (137, 143)
    finally:
        if c.agent is not None:
            c.kill_agent(signal.SIGTERM)
        c.server.stop()
