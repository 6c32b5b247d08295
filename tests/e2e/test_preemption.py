"""Priority inside a queue, through the live loop: a `build` pod preempts a `train` pod,
the victim's Job replaces it, and the replacement waits with its reason."""

from __future__ import annotations

from e2e_support import add_node, wait_for

SETUP = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: team}
spec:
  resources:
    gpu: {quota: 1, limit: 1, overQuotaWeight: 1}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: training
  namespace: default
  labels: {kai.scheduler/queue: team}
spec:
  template:
    spec:
      schedulerName: gpushare
      restartPolicy: Never
      containers:
      - name: main
        image: busybox
        resources: {limits: {nvidia.com/gpu: "1"}}
"""

URGENT = """
apiVersion: v1
kind: Pod
metadata:
  name: urgent
  namespace: default
  labels: {kai.scheduler/queue: team, priorityClassName: build}
spec:
  schedulerName: gpushare
  containers:
  - name: main
    image: busybox
    resources: {limits: {nvidia.com/gpu: "1"}}
"""


def test_build_pod_preempts_train_pod_in_its_queue(server, controllers, kubectl):
    add_node(server.kubeconfig, "box", "1xH100")
    kubectl.run("apply", "-f", "-", stdin=SETUP)

    def training_pods():
        return kubectl.json("get", "pods", "-n", "default", "-l", "job-name=training")["items"]

    first = wait_for(lambda: [p for p in training_pods() if p["spec"].get("nodeName")],
                     what="the training pod bound")[0]["metadata"]["name"]
    kubectl.run("apply", "-f", "-", stdin=URGENT)
    wait_for(lambda: kubectl.json("get", "pod", "urgent", "-n", "default")["spec"]
             .get("nodeName"), what="the build pod bound")
    events = kubectl.json("get", "events", "-n", "default")["items"]
    evicted = [e for e in events if e.get("reason") == "Evict"]
    assert [e["involvedObject"]["name"] for e in evicted] == [first]
    assert "preempt" in evicted[0]["message"]
    # The Job replaces its pod; the replacement waits, and says why.
    replacement = wait_for(
        lambda: [p for p in training_pods() if p["metadata"]["name"] != first],
        what="the Job's replacement pod")[0]["metadata"]["name"]
    wait_for(lambda: [e for e in kubectl.json("get", "events", "-n", "default")["items"]
                      if e.get("reason") == "Unschedulable"
                      and e["involvedObject"]["name"] == replacement],
             what="the replacement's Unschedulable event")
    assert not kubectl.json("get", "pod", replacement, "-n", "default")["spec"].get("nodeName")
