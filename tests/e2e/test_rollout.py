"""Deployment rollouts as kube-controller-manager runs them, driven by kubectl: revisions,
``rollout status``, ``history`` and ``undo``, and a rolling update that never drops below
``replicas - maxUnavailable`` available pods nor exceeds ``replicas + maxSurge``."""

from __future__ import annotations

import contextlib
import threading

from e2e_support import add_node, wait_for

from gpushare.kube.client import PODS, ApiError, KubeClient

REVISION = "deployment.kubernetes.io/revision"


def deployment(version: str) -> str:
    return f"""
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
  labels: {{kai.scheduler/queue: default-queue}}
spec:
  replicas: 4
  strategy: {{type: RollingUpdate, rollingUpdate: {{maxSurge: 1, maxUnavailable: 1}}}}
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata:
      labels: {{app: web, version: "{version}"}}
    spec:
      schedulerName: gpushare
      containers:
      - {{name: server, image: "python:{version}", command: ["sleep", "3600"]}}
"""


DEFAULT_QUEUE = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: default-queue}
spec: {resources: {gpu: {quota: 0, limit: -1, overQuotaWeight: 1}}}
"""


class Kubelet(threading.Thread):
    """Plays the node's part: a bound pod becomes Running and Ready a moment later; and
    records how many pods of the Deployment were live and ready at each look."""

    def __init__(self, client: KubeClient) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.stop = threading.Event()
        self.samples: list[tuple[int, int]] = []

    def run(self) -> None:
        while not self.stop.wait(0.3):
            pods = self.client.list(PODS.collection("default"), labelSelector="app=web")
            live = [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]
            ready = [p for p in live if any(c["type"] == "Ready" and c["status"] == "True"
                                            for c in p["status"].get("conditions") or [])]
            self.samples.append((len(live), len(ready)))
            for p in live:
                if p["spec"].get("nodeName") and p not in ready:
                    with contextlib.suppress(ApiError):
                        self.client.merge_patch(
                            PODS.item(p["metadata"]["name"], "default", "status"),
                            {"status": {"phase": "Running", "conditions": [
                                {"type": "Ready", "status": "True"}]}})


def test_rolling_update_status_history_and_undo(server, controllers, kubectl, client):
    add_node(server.kubeconfig, "box", "1xL40S")
    kubectl.run("apply", "-f", "-", stdin=DEFAULT_QUEUE)
    kubelet = Kubelet(client)
    kubelet.start()
    try:
        kubectl.run("apply", "-f", "-", stdin=deployment("3.11"))
        out = kubectl.run("rollout", "status", "deployment/web", "--timeout=60s").stdout
        assert "successfully rolled out" in out
        dep = kubectl.json("get", "deployment", "web")
        assert dep["metadata"]["annotations"][REVISION] == "1"
        assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 1}

        kubelet.samples.clear()
        kubectl.run("set", "image", "deployment/web", "server=python:3.12")
        out = kubectl.run("rollout", "status", "deployment/web", "--timeout=90s").stdout
        assert "successfully rolled out" in out
        assert kubectl.json("get", "deployment", "web")["metadata"]["annotations"][
            REVISION] == "2"
        # Never fewer than 4 - 1 ready, never more than 4 + 1 pods.
        assert min(ready for _, ready in kubelet.samples) >= 3, kubelet.samples
        assert max(live for live, _ in kubelet.samples) <= 5, kubelet.samples
        revisions = sorted(rs["metadata"]["annotations"][REVISION] for rs in
                           kubectl.json("get", "replicasets")["items"])
        assert revisions == ["1", "2"]

        history = kubectl.run("rollout", "history", "deployment/web").stdout
        assert "1" in history and "2" in history
        detail = kubectl.run("rollout", "history", "deployment/web", "--revision=1").stdout
        assert "python:3.11" in detail

        kubectl.run("rollout", "undo", "deployment/web")
        kubectl.run("rollout", "status", "deployment/web", "--timeout=90s")
        dep = kubectl.json("get", "deployment", "web")
        assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == "python:3.11"
        assert dep["metadata"]["annotations"][REVISION] == "3"
        images = wait_for(lambda: {p["spec"]["containers"][0]["image"] for p in kubectl.json(
            "get", "pods", "-l", "app=web")["items"] if not p["metadata"].get(
            "deletionTimestamp")} == {"python:3.11"}, timeout=30, what="old pods gone")
        assert images
        assert len(kubectl.json("get", "replicasets")["items"]) == 2  # the first one reused
    finally:
        kubelet.stop.set()
        kubelet.join(5)


STUCK = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
  labels: {kai.scheduler/queue: default-queue}
spec:
  replicas: 10
  progressDeadlineSeconds: 4
  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 3, maxUnavailable: 2}}
  selector: {matchLabels: {app: web}}
  template:
    metadata:
      labels: {app: web, version: "3.11"}
    spec:
      schedulerName: gpushare
      containers:
      - {name: server, image: "python:3.11", command: ["sleep", "3600"]}
"""


class PickyKubelet(Kubelet):
    """The node's part for one image only: pods of any other image stay bound but never
    become Ready (a broken release)."""

    def __init__(self, client: KubeClient, image: str) -> None:
        super().__init__(client)
        self.image = image

    def run(self) -> None:
        while not self.stop.wait(0.3):
            pods = self.client.list(PODS.collection("default"), labelSelector="app=web")
            for p in pods["items"]:
                ready = any(c["type"] == "Ready" and c["status"] == "True"
                            for c in p["status"].get("conditions") or [])
                good = p["spec"]["containers"][0]["image"] == self.image
                if p["spec"].get("nodeName") and good and not ready and not p[
                        "metadata"].get("deletionTimestamp"):
                    with contextlib.suppress(ApiError):
                        self.client.merge_patch(
                            PODS.item(p["metadata"]["name"], "default", "status"),
                            {"status": {"phase": "Running", "conditions": [
                                {"type": "Ready", "status": "True"}]}})


def _sizes(kubectl) -> dict[str, int]:
    return {rs["spec"]["template"]["spec"]["containers"][0]["image"]: rs["spec"]["replicas"]
            for rs in kubectl.json("get", "replicasets")["items"]}


def test_stuck_rollout_exceeds_its_deadline_and_a_resize_is_proportional(
        server, controllers, kubectl, client):
    add_node(server.kubeconfig, "box", "1xL40S")
    kubectl.run("apply", "-f", "-", stdin=DEFAULT_QUEUE)
    kubelet = PickyKubelet(client, "python:3.11")
    kubelet.start()
    try:
        kubectl.run("apply", "-f", "-", stdin=STUCK)
        kubectl.run("rollout", "status", "deployment/web", "--timeout=90s")
        kubectl.run("set", "image", "deployment/web", "server=python:broken")
        # 10 replicas, maxSurge 3, maxUnavailable 2: 8 old + 5 new, then no progress.
        wait_for(lambda: _sizes(kubectl) == {"python:3.11": 8, "python:broken": 5},
                 timeout=60, what="rollout stopped at 8 old + 5 new")
        status = kubectl.run("rollout", "status", "deployment/web", "--timeout=40s",
                             check=False)
        assert status.returncode != 0
        assert 'deployment "web" exceeded its progress deadline' in status.stderr
        condition = next(c for c in kubectl.json("get", "deployment", "web")["status"][
            "conditions"] if c["type"] == "Progressing")
        assert condition["status"] == "False"
        assert condition["reason"] == "ProgressDeadlineExceeded"

        # Resized mid-rollout: the 5 extra pods (18 allowed) go 3 to the old ReplicaSet
        # and 2 to the new one, in proportion to their sizes, as Kubernetes does.
        kubectl.run("scale", "deployment/web", "--replicas=15")
        wait_for(lambda: _sizes(kubectl) == {"python:3.11": 11, "python:broken": 7},
                 timeout=60, what="proportional scale-up")
    finally:
        kubelet.stop.set()
        kubelet.join(5)
