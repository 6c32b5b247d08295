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
    return json.loads(cluster.kubectl("get", *what, "-o", "json", "--show-managed-fields").stdout)


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


CONFIG = """
apiVersion: v1
kind: ConfigMap
metadata: {name: owned, labels: {team: nlp}}
data: {a: "1", b: "2"}
"""


def _managers(obj: dict) -> dict[str, dict]:
    return {f"{e['manager']}/{e['operation']}": e["fieldsV1"]
            for e in obj["metadata"].get("managedFields") or ()}


def test_server_side_apply_owns_removes_and_conflicts(cluster: Cluster) -> None:
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=CONFIG)
    cm = _get(cluster, "configmap", "owned")
    fields = _managers(cm)["kubectl/Apply"]
    assert fields["f:data"] == {"f:a": {}, "f:b": {}}
    assert fields["f:metadata"] == {"f:labels": {"f:team": {}}}
    # A field dropped from the manifest is removed.
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=CONFIG.replace(', b: "2"', ""))
    assert _get(cluster, "configmap", "owned")["data"] == {"a": "1"}
    # Another manager setting a different value conflicts, naming field and manager.
    other = CONFIG.replace('a: "1", b: "2"', 'a: "9"')
    done = cluster.kubectl("apply", "--server-side", "--field-manager=gitops", "-f", "-",
                           stdin=other, check=False)
    assert done.returncode != 0
    assert 'conflict with "kubectl"' in done.stderr and ".data.a" in done.stderr
    assert _get(cluster, "configmap", "owned")["data"] == {"a": "1"}
    # Same value: shared ownership, no conflict; then force takes the field over.
    cluster.kubectl("apply", "--server-side", "--field-manager=gitops", "-f", "-",
                    stdin=CONFIG.replace('a: "1", b: "2"', 'a: "1"'))
    cluster.kubectl("apply", "--server-side", "--field-manager=gitops", "--force-conflicts",
                    "-f", "-", stdin=other)
    cm = _get(cluster, "configmap", "owned")
    assert cm["data"] == {"a": "9"}
    assert "f:data" not in _managers(cm)["kubectl/Apply"]
    # An ordinary patch is recorded under its manager and takes the fields it changed.
    cluster.kubectl("patch", "configmap", "owned", "--type=merge", "-p",
                    json.dumps({"data": {"c": "3"}}))
    cm = _get(cluster, "configmap", "owned")
    assert _managers(cm)["kubectl-patch/Update"] == {"f:data": {"f:c": {}}}
    # kubectl drops everything it applied: what gitops (data.a, the shared label) and
    # kubectl-patch (data.c) own stays.
    cluster.kubectl("apply", "--server-side", "-f", "-",
                    stdin="apiVersion: v1\nkind: ConfigMap\nmetadata: {name: owned}\n")
    cm = _get(cluster, "configmap", "owned")
    assert cm["data"] == {"a": "9", "c": "3"} and cm["metadata"]["labels"] == {"team": "nlp"}
    cluster.kubectl("apply", "--server-side", "--field-manager=gitops", "-f", "-",
                    stdin="apiVersion: v1\nkind: ConfigMap\nmetadata: {name: owned}\n")
    cm = _get(cluster, "configmap", "owned")
    assert cm["data"] == {"c": "3"} and not cm["metadata"].get("labels")
    cluster.kubectl("delete", "configmap", "owned")


def test_server_side_apply_with_the_official_client(cluster: Cluster) -> None:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    apps = client.AppsV1Api(cluster.api_client())
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "ssa"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "ssa"}},
                 "template": {"metadata": {"labels": {"app": "ssa"}}, "spec": {
                     "containers": [{"name": "main", "image": "busybox:1",
                                     "env": [{"name": "A", "value": "1"}]}]}}}}
    apps.patch_namespaced_deployment("ssa", "default", deployment, field_manager="ci",
                                     _content_type="application/apply-patch+yaml")
    deployment["spec"]["template"]["spec"]["containers"][0]["image"] = "busybox:2"
    deployment["spec"]["replicas"] = 3
    try:
        apps.patch_namespaced_deployment("ssa", "default", deployment, field_manager="cd",
                                         _content_type="application/apply-patch+yaml")
        raise AssertionError("a conflicting apply was accepted")
    except ApiException as e:
        assert e.status == 409
        status = json.loads(e.body)
        fields = {c["field"] for c in status["details"]["causes"]}
        assert fields == {".spec.replicas",
                          '.spec.template.spec.containers[name="main"].image'}
    updated = apps.patch_namespaced_deployment("ssa", "default", deployment, field_manager="cd",
                                               force=True,
                                               _content_type="application/apply-patch+yaml")
    assert updated.spec.replicas == 3
    owners = {e.manager: e.fields_v1 for e in updated.metadata.managed_fields}
    container = owners["cd"]["f:spec"]["f:template"]["f:spec"]["f:containers"][
        'k:{"name":"main"}']
    assert "f:image" in container and "f:env" in container
    assert "f:replicas" not in owners["ci"]["f:spec"]
    apps.delete_namespaced_deployment("ssa", "default")
