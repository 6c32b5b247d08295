"""PodDisruptionBudget status from the disruption-controller: observedGeneration, the
expected and healthy pods, and the disruptions allowed, as kube-controller-manager keeps
them (the PodDisruptionBudget conformance tests wait for observedGeneration)."""

from __future__ import annotations

import json
import subprocess
import threading

import pytest
from e2e_support import KUBECTL, add_node, wait_for

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


def bound_pod(name: str, node: str) -> str:
    return pod(name).replace("spec:\n", f"spec:\n  nodeName: {node}\n")


def ready(client, name: str) -> None:
    """The node's part, played here: the pod runs and is Ready."""
    client.merge_patch(PODS.item(name, "default", "status"), {"status": {
        "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})


def allowed_is(kubectl, value: int):
    return lambda: kubectl.json("get", "pdb", "web").get("status", {}).get(
        "disruptionsAllowed") == value


def test_eviction_refused_at_zero_disruptions_allowed(server, controllers, kubectl, client):
    from kubernetes import client as k8s
    from kubernetes import config
    from kubernetes.client.exceptions import ApiException

    kubectl.run("apply", "-f", "-", stdin=PDB.replace("minAvailable: 1", "minAvailable: 2"))
    for name in ("web-1", "web-2"):
        kubectl.run("apply", "-f", "-", stdin=pod(name))
        ready(client, name)
    wait_for(lambda: kubectl.json("get", "pdb", "web")["status"].get("currentHealthy") == 2,
             what="two healthy pods counted")
    core = k8s.CoreV1Api(config.new_client_from_config(str(server.kubeconfig)))
    body = k8s.V1Eviction(metadata=k8s.V1ObjectMeta(name="web-1", namespace="default"))
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod_eviction("web-1", "default", body)
    assert refused.value.status == 429
    status = json.loads(refused.value.body)
    assert status["reason"] == "TooManyRequests"
    assert status["message"] == ("Cannot evict pod as it would violate the pod's disruption "
                                 "budget.")
    assert status["details"]["causes"] == [{
        "reason": "DisruptionBudget",
        "message": "The disruption budget web needs 2 healthy pods and has 2 currently"}]
    assert kubectl.json("get", "pod", "web-1")["metadata"].get("deletionTimestamp") is None
    # One disruption allowed: the first eviction takes it, the second is refused.
    kubectl.run("patch", "pdb", "web", "--type=merge", "-p", '{"spec":{"minAvailable":1}}')
    wait_for(allowed_is(kubectl, 1), what="one disruption allowed")
    core.create_namespaced_pod_eviction("web-1", "default", body)
    second = k8s.V1Eviction(metadata=k8s.V1ObjectMeta(name="web-2", namespace="default"))
    with pytest.raises(ApiException) as again:
        core.create_namespaced_pod_eviction("web-2", "default", second)
    assert again.value.status == 429


def test_kubectl_drain_waits_for_the_budget_and_retries(server, controllers, kubectl, client):
    add_node(server.kubeconfig, "n1", "1xL4")
    add_node(server.kubeconfig, "n2", "1xL4")
    kubectl.run("apply", "-f", "-", stdin=PDB)
    for name in ("web-1", "web-2"):
        kubectl.run("apply", "-f", "-", stdin=bound_pod(name, "n1"))
        ready(client, name)
    wait_for(allowed_is(kubectl, 1), what="one disruption allowed")
    drain = subprocess.Popen(
        [KUBECTL, "--kubeconfig", str(server.kubeconfig), "drain", "n1", "--force",
         "--grace-period=0", "--timeout=90s"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(drain.stdout.readline, "")),
                              daemon=True)
    reader.start()
    try:
        # One pod goes; the other waits for the budget, drain retrying on the 429.
        wait_for(lambda: any("will retry after 5s" in line for line in lines),
                 what="drain refused by the budget", timeout=60)
        assert drain.poll() is None
        assert [p["metadata"]["name"] for p in kubectl.json("get", "pods")["items"]
                if p["spec"].get("nodeName") == "n1"] in (["web-1"], ["web-2"])
        assert kubectl.json("get", "node", "n1")["spec"].get("unschedulable") is True
        # A third healthy pod elsewhere gives the budget room: drain's retry succeeds.
        kubectl.run("apply", "-f", "-", stdin=bound_pod("web-3", "n2"))
        ready(client, "web-3")
        drain.wait(timeout=60)
        reader.join(timeout=10)
    finally:
        if drain.poll() is None:
            drain.kill()
    out = "".join(lines)
    assert drain.returncode == 0, out
    assert ("Cannot evict pod as it would violate the pod's disruption budget." in out
            and "will retry after 5s" in out), out
    assert "node/n1 drained" in out
    left = {p["metadata"]["name"] for p in kubectl.json("get", "pods")["items"]}
    assert left == {"web-3"}
