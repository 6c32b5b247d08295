"""ReplicationControllers keep their pods as ReplicaSets do, and say when a pod could not
be created (an exceeded quota): the ReplicaFailure condition Kubernetes' conformance tests
wait for, gone again once the controller is within the quota; their pods go with them."""

from __future__ import annotations

from e2e_support import wait_for

RC = """
apiVersion: v1
kind: ReplicationController
metadata: {name: web, namespace: default}
spec:
  replicas: 3
  selector: {app: web}
  template:
    metadata:
      labels: {app: web, kai.scheduler/queue: default-queue}
    spec:
      containers:
      - {name: main, image: busybox, command: ["sleep", "3600"]}
"""


def _pods(kubectl) -> list[dict]:
    return [p for p in kubectl.json("get", "pods", "-l", "app=web")["items"]
            if not p["metadata"].get("deletionTimestamp")]


def _failure(kubectl):
    # no status yet until the controller's first write
    status = kubectl.json("get", "rc", "web").get("status") or {}
    return next((c for c in status.get("conditions") or []
                 if c["type"] == "ReplicaFailure"), None)


def test_rc_keeps_pods_reports_quota_failures_and_takes_its_pods_along(server, controllers,
                                                                        kubectl):
    kubectl.run("create", "quota", "pods", "--hard=pods=2")
    kubectl.run("apply", "-f", "-", stdin=RC)
    condition = wait_for(lambda: _failure(kubectl), what="the ReplicaFailure condition")
    assert condition["status"] == "True" and condition["reason"] == "FailedCreate"
    assert "exceeded quota" in condition["message"]
    pods = _pods(kubectl)
    assert len(pods) == 2
    owner = pods[0]["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == (
        "ReplicationController", "web", True)
    assert kubectl.json("get", "rc", "web")["status"]["replicas"] == 2

    kubectl.run("scale", "rc", "web", "--replicas=2")
    wait_for(lambda: _failure(kubectl) is None, what="the condition cleared")

    kubectl.run("delete", "pod", pods[0]["metadata"]["name"], "--wait=false")
    wait_for(lambda: len(_pods(kubectl)) == 2
             and pods[0]["metadata"]["name"] not in {p["metadata"]["name"]
                                                    for p in _pods(kubectl)},
             what="a replacement pod")

    kubectl.run("delete", "rc", "web")
    wait_for(lambda: not _pods(kubectl), timeout=30, what="the RC's pods collected")
