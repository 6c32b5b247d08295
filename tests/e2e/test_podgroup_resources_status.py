"""A Job's PodGroup carries KAI's status.resourcesStatus, kept current as its pods finish."""

from __future__ import annotations

import time

import yaml
from e2e_support import add_node, wait_for

QUEUE = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata:
  name: research
spec:
  resources:
    gpu: {quota: 4, limit: -1, overQuotaWeight: 1}
    cpu: {quota: -1, limit: -1, overQuotaWeight: 1}
    memory: {quota: -1, limit: -1, overQuotaWeight: 1}
"""

JOB = """
apiVersion: batch/v1
kind: Job
metadata:
  name: pair
  namespace: default
  labels: {kai.scheduler/queue: research}
spec:
  parallelism: 2
  completions: 2
  template:
    spec:
      schedulerName: gpushare
      restartPolicy: Never
      containers:
      - name: worker
        image: python:3.11
        command: ["python", "-c", "print('step')"]
        resources:
          requests: {cpu: 500m, memory: 1Gi}
          limits: {nvidia.com/gpu: "1"}
"""


def _group(kubectl):
    listing = yaml.safe_load(kubectl.run("get", "podgroup", "-n", "default", "-o", "yaml").stdout)
    groups = listing["items"]
    return groups[0] if len(groups) == 1 else None


def _resources(kubectl):
    group = _group(kubectl)
    return ((group or {}).get("status") or {}).get("resourcesStatus")


def test_job_of_two_gpu_pods_shows_allocated_and_requested(server, controllers, kubectl):
    add_node(server.kubeconfig, "box", "4xH100")
    kubectl.run("apply", "-f", "-", stdin=QUEUE)
    kubectl.run("apply", "-f", "-", stdin=JOB)
    both = {"cpu": "1", "memory": "2Gi", "nvidia.com/gpu": "2"}
    status = wait_for(lambda: (s := _resources(kubectl)) and s.get("allocated") == both and s,
                      what="both pods allocated in the PodGroup's status")
    assert status["requested"] == both
    # Jobs run at the preemptible "train" priority: nothing non-preemptible is held.
    assert "allocatedNonPreemptible" not in status
    pods = kubectl.json("get", "pods", "-n", "default", "-l", "job-name=pair")["items"]
    assert len(pods) == 2 and all(p["spec"].get("nodeName") == "box" for p in pods)

    # One pod finishes (the agent would write this; the node here has none).
    kubectl.run("patch", "pod", pods[0]["metadata"]["name"], "-n", "default",
                "--subresource=status", "--type=merge", "-p", '{"status": {"phase": "Succeeded"}}')
    one = {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "1"}
    status = wait_for(lambda: (s := _resources(kubectl)) and s.get("allocated") == one and s,
                      what="the finished pod's share released")
    assert status["requested"] == one

    kubectl.run("patch", "pod", pods[1]["metadata"]["name"], "-n", "default",
                "--subresource=status", "--type=merge", "-p", '{"status": {"phase": "Succeeded"}}')
    wait_for(lambda: _resources(kubectl) == {}, what="nothing held once both finished")
    wait_for(lambda: (_group(kubectl) or {}).get("status", {}).get("phase") == "Succeeded",
             what="the PodGroup Succeeded")

    # Settled: no further writes (each change above was written, not re-written).
    writer = controllers.controllers["podgroup-status"]
    settled = writer.writes
    version = _group(kubectl)["metadata"]["resourceVersion"]
    time.sleep(1.5)
    assert writer.writes == settled <= 6
    assert _group(kubectl)["metadata"]["resourceVersion"] == version
