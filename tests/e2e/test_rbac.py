"""The controllers run with only the permissions of `controllers/rbac.yaml`, and a user
without them is refused (the same RBAC a real cluster applies)."""

from __future__ import annotations

import subprocess
import sys
from importlib import resources

import pytest
import yaml
from e2e_support import add_node, wait_for

from gpushare.kube.client import PODS, ApiError, KubeClient


def _kubeconfig_for(server, user: str, path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "gpushare.cli.main", "kubeconfig", "--data-dir",
         str(server.data_dir), "--user", user, "-o", str(path)],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return str(path)


def test_controllers_work_with_the_shipped_cluster_role(server, kubectl, tmp_path):
    from gpushare.controller_manager import start_controllers

    # The API server created the shipped roles and bindings itself, as they are in the file.
    shipped = {d["metadata"]["name"] for d in yaml.safe_load_all(
        resources.files("gpushare.controllers").joinpath("rbac.yaml").read_text())}
    for name in shipped:
        assert kubectl.json("get", "clusterrole,clusterrolebinding", name)["items"]
    restricted = _kubeconfig_for(server, "system:gpushare-controllers",
                                 tmp_path / "ctl.kubeconfig")
    nobody = KubeClient.from_kubeconfig(_kubeconfig_for(server, "nobody",
                                                        tmp_path / "nobody.kubeconfig"))
    with pytest.raises(ApiError) as refused:
        nobody.list(PODS.collection())
    assert refused.value.status == 403
    nobody.close()

    add_node(server.kubeconfig, "box", "1xL40S")
    kubectl.run("apply", "-f", "-", stdin="""
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: team}
spec:
  resources:
    gpu: {quota: 1, limit: -1, overQuotaWeight: 1}
---
apiVersion: v1
kind: Pod
metadata:
  name: work
  namespace: default
  labels: {kai.scheduler/queue: team}
  annotations: {gpu-fraction: "0.5"}
spec:
  containers: [{name: main, image: busybox}]
""")
    running = start_controllers(restricted)
    try:
        wait_for(lambda: kubectl.json("get", "pod", "work", "-n", "default")["spec"]
                 .get("nodeName"), what="the pod bound by restricted controllers")
        wait_for(lambda: kubectl.json("get", "queue", "team").get("status", {})
                 .get("allocated", {}).get("nvidia.com/gpu") == "500m",
                 what="queue status written by restricted controllers")
        # The workload controllers too: a Deployment's revision and status, an RC's pods,
        # a Service's Endpoints.
        kubectl.run("apply", "-f", "-", stdin=WORKLOADS)
        wait_for(lambda: (kubectl.json("get", "deployment", "web").get("metadata", {})
                          .get("annotations") or {}).get("deployment.kubernetes.io/revision")
                 == "1" and kubectl.json("get", "deployment", "web").get("status"),
                 what="the Deployment's revision and status")
        wait_for(lambda: kubectl.json("get", "pods", "-l", "app=legacy")["items"],
                 what="the RC's pod")
        wait_for(lambda: kubectl.run("get", "endpointslices", "-l",
                                     "kubernetes.io/service-name=web", "-o", "name")
                 .stdout.strip(), what="the Service's EndpointSlice")
    finally:
        running.stop()


WORKLOADS = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web, kai.scheduler/queue: team}}
    spec:
      containers: [{name: main, image: busybox}]
---
apiVersion: v1
kind: ReplicationController
metadata: {name: legacy, namespace: default}
spec:
  replicas: 1
  selector: {app: legacy}
  template:
    metadata: {labels: {app: legacy, kai.scheduler/queue: team}}
    spec:
      containers: [{name: main, image: busybox}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  selector: {app: web}
  ports: [{port: 80}]
"""
