"""A pod that names a PodGroup made elsewhere joins it; the pod-grouper adds none."""

from __future__ import annotations

from e2e_support import add_node, wait_for

MANIFESTS = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: team}
spec:
  resources:
    gpu: {quota: 2, limit: -1, overQuotaWeight: 1}
---
apiVersion: scheduling.run.ai/v2alpha2
kind: PodGroup
metadata: {name: made-by-hand, namespace: default}
spec: {minMember: 2, queue: team, priorityClassName: train}
""" + "".join(f"""---
apiVersion: v1
kind: Pod
metadata:
  name: member-{i}
  namespace: default
  annotations: {{pod-group-name: made-by-hand}}
spec:
  schedulerName: gpushare
  containers:
  - name: main
    image: busybox
    resources: {{limits: {{nvidia.com/gpu: "1"}}}}
""" for i in range(2))


def test_pods_join_an_external_podgroup_as_a_gang(server, controllers, kubectl):
    add_node(server.kubeconfig, "box", "2xA100")
    kubectl.run("apply", "-f", "-", stdin=MANIFESTS)

    def bound():
        pods = kubectl.json("get", "pods", "-n", "default")["items"]
        return len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods) and pods

    pods = wait_for(bound, what="both members bound")
    assert {p["metadata"]["annotations"]["pod-group-name"] for p in pods} == {"made-by-hand"}
    groups = kubectl.json("get", "podgroups", "-n", "default")["items"]
    assert [g["metadata"]["name"] for g in groups] == ["made-by-hand"]
