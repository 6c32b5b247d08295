"""A Deployment runs: ReplicaSet, pods with one PodGroup each at inference priority,
scaling, and a new template moving the replicas to a new ReplicaSet."""

from __future__ import annotations

from e2e_support import add_node, wait_for


def deployment(replicas: int, version: str) -> str:
    return f"""
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
  labels: {{kai.scheduler/queue: serving}}
spec:
  replicas: {replicas}
  # Pods on a node without an agent never become available: a rolling update would wait
  # for them (tests/e2e/test_rollout.py); Recreate moves the replicas at once.
  strategy: {{type: Recreate}}
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata:
      labels: {{app: web, version: "{version}"}}
      annotations: {{gpu-fraction: "0.5"}}
    spec:
      schedulerName: gpushare
      containers:
      - name: server
        image: python:3.11
        command: ["python", "-m", "http.server"]
"""


QUEUE = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: serving}
spec:
  resources:
    gpu: {quota: 1, limit: -1, overQuotaWeight: 1}
"""


def _pods(kubectl):
    return [p for p in kubectl.json("get", "pods", "-n", "default", "-l", "app=web")["items"]
            if not p["metadata"].get("deletionTimestamp")]


def test_deployment_runs_scales_and_rolls_to_a_new_template(server, controllers, kubectl):
    add_node(server.kubeconfig, "box", "1xL40S")
    kubectl.run("apply", "-f", "-", stdin=QUEUE)
    kubectl.run("apply", "-f", "-", stdin=deployment(2, "1"))

    def bound(count, version):
        pods = _pods(kubectl)
        ok = (len(pods) == count and all(p["spec"].get("nodeName") for p in pods)
              and {p["metadata"]["labels"]["version"] for p in pods} == {version})
        return pods if ok else None

    pods = wait_for(lambda: bound(2, "1"), what="two replicas bound")
    assert {p["metadata"]["annotations"]["gpushare.io/gpu-indices"] for p in pods} == {"0"}
    groups = kubectl.json("get", "podgroups", "-n", "default")["items"]
    assert len(groups) == 2  # one PodGroup per pod
    assert {g["spec"]["priorityClassName"] for g in groups} == {"inference"}
    assert {g["spec"]["queue"] for g in groups} == {"serving"}

    kubectl.run("apply", "-f", "-", stdin=deployment(3, "1"))
    wait_for(lambda: len(_pods(kubectl)) == 3, what="a third replica")
    # The GPU is full (two halves): the third one waits, and says why.
    assert sum(1 for p in _pods(kubectl) if not p["spec"].get("nodeName")) == 1

    kubectl.run("apply", "-f", "-", stdin=deployment(2, "2"))
    wait_for(lambda: bound(2, "2"), timeout=60, what="the new template's replicas bound")
    replicasets = kubectl.json("get", "replicasets", "-n", "default")["items"]
    assert sorted(rs["spec"]["replicas"] for rs in replicasets) == [0, 2]
