"""What kube-scheduler users read: ``PodScheduled=False`` / ``Unschedulable`` with the
scheduler's message on a pod that does not fit, a ``Scheduled`` event on every binding,
and PodGroup conditions that follow the job (cleared once it is placed)."""

from __future__ import annotations

from e2e_support import add_node, wait_for

QUEUE = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: team}
spec:
  resources:
    gpu: {quota: 1, limit: -1, overQuotaWeight: 1}
"""


def pod(name: str, gpus: int) -> str:
    return f"""
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
  labels: {{kai.scheduler/queue: team}}
spec:
  schedulerName: gpushare
  containers:
  - name: main
    image: busybox
    command: ["sleep", "3600"]
    resources: {{limits: {{nvidia.com/gpu: {gpus}}}}}
"""


def _scheduled(kubectl, name: str) -> dict | None:
    conditions = (kubectl.json("get", "pod", name).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "PodScheduled"), None)


def test_unschedulable_condition_scheduled_events_and_current_podgroup_conditions(
    server, controllers, kubectl
):
    add_node(server.kubeconfig, "box", "2xL40S")
    kubectl.run("apply", "-f", "-", stdin=QUEUE)
    kubectl.run("apply", "-f", "-", stdin=pod("big", 4))

    condition = wait_for(lambda: (_scheduled(kubectl, "big") or {}).get("status") == "False"
                         and _scheduled(kubectl, "big"), what="PodScheduled=False on big")
    assert condition["reason"] == "Unschedulable"
    assert condition["message"]  # the scheduler's reason, as the event says
    events = kubectl.json("get", "events", "--field-selector", "involvedObject.name=big")
    assert condition["message"] in {e["message"] for e in events["items"]
                                    if e["reason"] == "Unschedulable"}
    # kubectl wait understands it the way it does for kube-scheduler.
    kubectl.run("wait", "--for=condition=PodScheduled=false", "pod/big", "--timeout=5s")

    pg_name = wait_for(lambda: kubectl.json("get", "pod", "big")["metadata"]
                       .get("annotations", {}).get("pod-group-name"), what="big's PodGroup")
    stored = wait_for(lambda: (kubectl.json("get", "podgroup", pg_name).get("status") or {})
                      .get("schedulingConditions"), what="the PodGroup's Unschedulable condition")
    assert [(c["type"], c["nodePool"], c["reason"], c["status"]) for c in stored] == [
        ("UnschedulableOnNodePool", "default", "Unschedulable", "True")]
    assert stored[0]["message"] == condition["message"]
    assert stored[0]["reasons"][0]["reason"] == "Unschedulable"
    assert int(stored[0]["transitionID"]) >= 1

    # The node grows: the pod is placed, says so, and the PodGroup no longer says it waits.
    add_node(server.kubeconfig, "box", "4xL40S")
    wait_for(lambda: (_scheduled(kubectl, "big") or {}).get("status") == "True",
             what="PodScheduled=True on big")
    wait_for(lambda: not (kubectl.json("get", "podgroup", pg_name).get("status") or {})
             .get("schedulingConditions"), what="the PodGroup's condition cleared")

    kubectl.run("apply", "-f", "-", stdin=pod("small", 0))
    wait_for(lambda: kubectl.json("get", "pod", "small")["spec"].get("nodeName"),
             what="small bound")

    def scheduled_events():
        items = kubectl.json("get", "events", "--field-selector", "reason=Scheduled")["items"]
        return {e["involvedObject"]["name"]: e["message"] for e in items}

    got = wait_for(lambda: len(scheduled_events()) == 2 and scheduled_events(),
                   what="a Scheduled event per binding")
    assert got == {"big": "Successfully assigned default/big to box",
                   "small": "Successfully assigned default/small to box"}
