"""Kubernetes fidelity against kubectl and the official client: schemas of built-in kinds in
OpenAPI (explain), strategic merge patch by type, server-side apply field ownership, the
kinds kubectl's create subcommands send, and Kubernetes' Status shapes."""

from __future__ import annotations

import json

from apiserver_harness import Cluster

SERVICE = """
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports:
  - {name: http, port: 80, targetPort: 8080}
"""


def _get(cluster: Cluster, *what: str) -> dict:
    return json.loads(cluster.kubectl("get", *what, "-o", "json").stdout)


def test_explain_builtin_kinds(cluster: Cluster) -> None:
    out = cluster.kubectl("explain", "pod.spec").stdout
    assert "KIND:       Pod" in out
    assert "containers\t<[]Container> -required-" in out
    assert "schedulerName\t<string>" in out
    ports = cluster.kubectl("explain", "service.spec.ports").stdout
    assert "FIELD: ports <[]ServicePort>" in ports
    assert "Number or name of the port" in cluster.kubectl(
        "explain", "service.spec.ports.targetPort").stdout
    assert "Deployment" in cluster.kubectl("explain", "deployments.spec.strategy").stdout
    v2 = json.loads(cluster.kubectl("get", "--raw", "/openapi/v2").stdout)
    service_ports = v2["definitions"]["io.k8s.api.core.v1.ServiceSpec"]["properties"]["ports"]
    assert service_ports["x-kubernetes-patch-merge-key"] == "port"
    assert service_ports["items"] == {"$ref": "#/definitions/io.k8s.api.core.v1.ServicePort"}


def test_strategic_merge_uses_the_merge_keys_of_the_type(cluster: Cluster) -> None:
    cluster.kubectl("apply", "-f", "-", stdin=SERVICE)
    cluster.kubectl("patch", "service", "web", "-p",
                    json.dumps({"spec": {"ports": [{"name": "https", "port": 443}]}}))
    ports = _get(cluster, "service", "web")["spec"]["ports"]
    assert [(p["name"], p["port"]) for p in ports] == [("http", 80), ("https", 443)]
    cluster.kubectl("patch", "service", "web", "-p",
                    json.dumps({"spec": {"ports": [{"port": 80, "targetPort": 9090}]}}))
    ports = _get(cluster, "service", "web")["spec"]["ports"]
    assert [(p["port"], p.get("targetPort")) for p in ports] == [(80, 9090), (443, None)]
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "tainted"},
            "spec": {"taints": [{"key": "a", "value": "1", "effect": "NoSchedule"}]}}
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(node))
    cluster.kubectl("patch", "node", "tainted", "-p", json.dumps(
        {"spec": {"taints": [{"key": "b", "value": "2", "effect": "NoSchedule"}]}}))
    # NodeSpec.taints has no patch strategy: the list is replaced, as Kubernetes does.
    assert _get(cluster, "node", "tainted")["spec"]["taints"] == [
        {"key": "b", "value": "2", "effect": "NoSchedule"}]
    cluster.kubectl("delete", "node", "tainted")
    cluster.kubectl("delete", "service", "web")
