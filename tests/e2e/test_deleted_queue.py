"""A queue deleted while it still has pods: its running pods keep their GPU share (nothing
is booked twice), new pods labelled with it wait with a reason naming the missing queue,
and its parent stops counting it; created again, the queue schedules its pods."""

from __future__ import annotations

from e2e_support import add_node, wait_for

QUEUES = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: ml-org}
spec:
  resources:
    gpu: {quota: 1, limit: 1, overQuotaWeight: 1}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: nlp}
spec:
  parentQueue: ml-org
  resources:
    gpu: {quota: 0.5, limit: 1, overQuotaWeight: 1}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: vision}
spec:
  parentQueue: ml-org
  resources:
    gpu: {quota: 0.5, limit: 1, overQuotaWeight: 1}
"""

NLP_QUEUE = QUEUES.split("---")[1]


def pod(name: str, queue: str, fraction: str) -> str:
    return f"""
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
  labels: {{kai.scheduler/queue: {queue}}}
  annotations: {{gpu-fraction: "{fraction}"}}
spec:
  schedulerName: gpushare
  containers:
  - {{name: main, image: busybox, command: ["sleep", "3600"]}}
"""


def _queue_status(kubectl, name: str, field: str) -> str | None:
    queue = kubectl.json("get", "queue", name)
    return ((queue.get("status") or {}).get(field) or {}).get("nvidia.com/gpu")


def test_a_deleted_queue_schedules_nothing_new_and_its_parent_stops_counting_it(
    server, controllers, kubectl
):
    add_node(server.kubeconfig, "box", "1xL40S")
    kubectl.run("apply", "-f", "-", stdin=QUEUES)
    kubectl.run("apply", "-f", "-", stdin=pod("nlp-1", "nlp", "0.5"))
    wait_for(lambda: kubectl.json("get", "pod", "nlp-1")["spec"].get("nodeName"),
             what="nlp-1 bound")
    wait_for(lambda: _queue_status(kubectl, "ml-org", "requested") == "500m",
             what="ml-org counting nlp's request")

    kubectl.run("delete", "queue", "nlp")
    kubectl.run("apply", "-f", "-", stdin=pod("nlp-2", "nlp", "0.25"))

    def waiting_for_queue():
        events = kubectl.json("get", "events", "--field-selector",
                              "involvedObject.name=nlp-2")["items"]
        return [e for e in events if "queue 'nlp' does not exist" in e.get("message", "")]

    wait_for(waiting_for_queue, what="nlp-2's event naming the missing queue")
    assert not kubectl.json("get", "pod", "nlp-2")["spec"].get("nodeName")
    # The parent no longer counts the deleted queue's pods, bound or pending.
    wait_for(lambda: _queue_status(kubectl, "ml-org", "requested") in ("0", None),
             what="ml-org no longer counting nlp")

    # nlp-1 still runs on half the GPU: a 0.75 pod of vision does not fit next to it, and
    # nlp-1 (whose queue is gone) is no victim; a 0.5 pod does.
    kubectl.run("apply", "-f", "-", stdin=pod("vision-big", "vision", "0.75"))
    kubectl.run("apply", "-f", "-", stdin=pod("vision-half", "vision", "0.5"))
    wait_for(lambda: kubectl.json("get", "pod", "vision-half")["spec"].get("nodeName"),
             what="vision-half bound")
    assert not kubectl.json("get", "pod", "vision-big")["spec"].get("nodeName")
    assert kubectl.json("get", "pod", "nlp-1")["metadata"].get("deletionTimestamp") is None

    # The queue comes back: its pending pod is scheduled again.
    kubectl.run("delete", "pod", "vision-half", "vision-big", "--wait=false")
    kubectl.run("apply", "-f", "-", stdin=NLP_QUEUE)
    wait_for(lambda: kubectl.json("get", "pod", "nlp-2")["spec"].get("nodeName"),
             what="nlp-2 bound once its queue exists again")
