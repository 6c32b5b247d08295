"""Required node affinity on the GPU model (``nvidia.com/gpu.product In [...]``) steers a
pod live as a ``gpu_spec`` does in the trace simulator: only nodes of an allowed model."""

from __future__ import annotations

from e2e_support import add_node, fraction_pod, team_queue, wait_for

QUEUE = team_queue("-1", unlimited_cpu_memory=True)

AFFINITY = """\
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions:
          - {key: nvidia.com/gpu.product, operator: In, values: [%s]}
"""


def pod(name: str, models: str) -> str:
    return fraction_pod(name, "0.5", AFFINITY % models)


def test_gpu_product_affinity_picks_the_allowed_model_or_waits(server, controllers, kubectl):
    # Equal nodes: without the affinity binpack would take "a" (first by name).
    add_node(server.kubeconfig, "a", "2xL40S")
    add_node(server.kubeconfig, "b", "2xT4")
    kubectl.run("apply", "-f", "-", stdin=QUEUE)
    kubectl.run("apply", "-f", "-", stdin=pod("on-t4", models="Tesla-T4, NVIDIA-A10"))
    kubectl.run("apply", "-f", "-", stdin=pod("on-h100",
                                                     models="NVIDIA-H100-80GB-HBM3"))
    node = wait_for(lambda: kubectl.json("get", "pod", "on-t4", "-n", "default")["spec"]
                    .get("nodeName"), what="on-t4 bound")
    assert node == "b"

    def unschedulable():
        events = kubectl.json("get", "events", "-n", "default")["items"]
        return [e for e in events if e.get("reason") == "Unschedulable"
                and e["involvedObject"]["name"] == "on-h100"]

    event = wait_for(unschedulable, what="an Unschedulable event for on-h100")[0]
    assert "node(s) didn't match Pod's node affinity/selector" in event["message"]
    assert not kubectl.json("get", "pod", "on-h100", "-n", "default")["spec"].get("nodeName")
