"""Messages in kube-scheduler's words, end to end: a gang on a cordoned node, each of its
pods told about itself; a node with an untolerated taint; top-level quotas above the
cluster's GPUs warned about on the Queues and in ``gpushare status``."""

from __future__ import annotations

import json
import subprocess
import sys

from e2e_support import add_node, wait_for

QUEUES = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: team}
spec:
  resources:
    gpu: {quota: 1, limit: -1, overQuotaWeight: 1}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: other-org}
spec:
  resources:
    gpu: {quota: 1, limit: -1, overQuotaWeight: 1}
"""

GANG = """
apiVersion: scheduling.run.ai/v2alpha2
kind: PodGroup
metadata: {name: gang, namespace: default}
spec: {minMember: 1, queue: team}
""" + "".join(f"""---
apiVersion: v1
kind: Pod
metadata:
  name: gang-{i}
  namespace: default
  labels: {{kai.scheduler/queue: team}}
  annotations: {{pod-group-name: gang, gpu-fraction: "0.5"}}
spec:
  schedulerName: gpushare
  containers: [{{name: c, image: busybox, command: [sleep, "3600"]}}]
""" for i in range(3))


def _message(kubectl, name: str) -> str:
    conditions = (kubectl.json("get", "pod", name).get("status") or {}).get("conditions") or []
    return next((c.get("message") or "" for c in conditions
                 if c["type"] == "PodScheduled" and c["status"] == "False"), "")


def test_cordoned_and_tainted_nodes_in_kube_schedulers_words(server, controllers, kubectl):
    add_node(server.kubeconfig, "cordoned", "1xL40S")
    add_node(server.kubeconfig, "agentless", "1xL40S", tainted=True)
    kubectl.run("cordon", "cordoned")
    kubectl.run("apply", "-f", "-", stdin=QUEUES)
    kubectl.run("apply", "-f", "-", stdin=GANG)
    for i in range(3):
        message = wait_for(lambda i=i: "were unschedulable" in _message(kubectl, f"gang-{i}")
                           and _message(kubectl, f"gang-{i}"), what=f"gang-{i}'s reason")
        assert "1 node(s) were unschedulable" in message, message
        assert "1 node(s) had untolerated taint {gpushare.io/no-agent: " in message, message
        assert "node not ready" not in message and "node selector" not in message
        # its own name, never a sibling's
        for j in range(3):
            assert (f"default/gang-{j} " in message) == (i == j) or "for pod" not in message

    # the cordoned node does not count: the cluster has 1 schedulable GPU; top-level
    # quotas of 1.5 each promise more than that
    kubectl.run("apply", "-f", "-", stdin=QUEUES.replace("quota: 1,", "quota: 1.5,"))
    expected = "top-level GPU quotas sum to 3 (other-org 1.5, team 1.5) but the cluster has 1"

    def warned():
        events = kubectl.json("get", "events", "-A")["items"]
        found = [e for e in events if e["reason"] == "QuotaOvercommitted"
                 and e["involvedObject"].get("kind") == "Queue"
                 and expected in e["message"]]
        return found if len({e["involvedObject"]["name"] for e in found}) == 2 else None
    events = wait_for(warned, what="QuotaOvercommitted events")
    assert {e["involvedObject"]["name"] for e in events} == {"team", "other-org"}, events
    done = subprocess.run([sys.executable, "-m", "gpushare.cli.main", "status", "--json",
                           "--kubeconfig", str(server.kubeconfig)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["warnings"] == [
        expected + " GPU(s): not every guarantee can be met at once"], done.stdout[-600:]
