"""PodDisruptionBudget status from the disruption-controller: observedGeneration, the
expected and healthy pods, and the disruptions allowed, as kube-controller-manager keeps
them (the PodDisruptionBudget conformance tests wait for observedGeneration)."""

from __future__ import annotations

from e2e_support import wait_for

from gpushare.kube.client import PODS

PDB = """
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: default}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: web}}
"""


def pod(name: str) -> str:
    return f"""
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
  labels: {{app: web, kai.scheduler/queue: default-queue}}
spec:
  containers: [{{name: main, image: busybox}}]
"""


def test_pdb_status_counts_healthy_pods(server, controllers, kubectl, client):
    kubectl.run("apply", "-f", "-", stdin=PDB)
    status = wait_for(lambda: kubectl.json("get", "pdb", "web").get("status", {})
                      .get("observedGeneration"), what="the PDB processed")
    assert status == 1
    first = kubectl.json("get", "pdb", "web")["status"]
    assert (first["expectedPods"], first["currentHealthy"], first["disruptionsAllowed"]) == (
        0, 0, 0)
    for name in ("web-1", "web-2"):
        kubectl.run("apply", "-f", "-", stdin=pod(name))
        # The node's part, played here: the pod is Ready.
        client.merge_patch(PODS.item(name, "default", "status"), {"status": {
            "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})

    def counted():
        got = kubectl.json("get", "pdb", "web")["status"]
        return got if got.get("currentHealthy") == 2 else None

    status = wait_for(counted, what="two healthy pods counted")
    assert (status["expectedPods"], status["desiredHealthy"], status["disruptionsAllowed"]) == (
        2, 1, 1)
    allowed = next(c for c in status["conditions"] if c["type"] == "DisruptionAllowed")
    assert allowed["status"] == "True" and allowed["reason"] == "SufficientPods"
    kubectl.run("patch", "pdb", "web", "--type=merge", "-p", '{"spec":{"minAvailable":2}}')
    wait_for(lambda: kubectl.json("get", "pdb", "web")["status"].get("observedGeneration") == 2
             and kubectl.json("get", "pdb", "web")["status"]["disruptionsAllowed"] == 0,
             what="the new budget processed")
