"""Logical clusters, runtime CRDs and RBAC."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from apiserver_harness import Cluster, http_client

WIDGETS = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget",
                  "shortNames": ["wd"]},
        "versions": [{
            "name": "v1", "served": True, "storage": True,
            "subresources": {"status": {}},
            "additionalPrinterColumns": [
                {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                {"name": "Color", "type": "string", "jsonPath": ".spec.color"},
                {"name": "Ready", "type": "string", "jsonPath": ".status.ready"}],
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "required": ["size"], "properties": {
                    "size": {"type": "integer", "minimum": 1},
                    "color": {"type": "string", "enum": ["red", "blue"]}}},
                "status": {"type": "object", "properties": {"ready": {"type": "string"}}}}}},
        }],
    },
}


@pytest.fixture(scope="module")
def http(cluster: Cluster) -> Iterator[httpx.Client]:
    with http_client(cluster.server) as c:
        yield c


def test_runtime_crd_is_served_with_columns_and_validation(cluster: Cluster,
                                                             http: httpx.Client) -> None:
    r = http.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=WIDGETS)
    assert r.status_code == 201, r.text
    conditions = {c["type"]: c["status"] for c in r.json()["status"]["conditions"]}
    assert conditions["Established"] == "True"
    path = "/apis/example.com/v1/namespaces/default/widgets"
    good = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"},
            "spec": {"size": 3, "color": "red"}, "status": {"ready": "ignored on create"}}
    created = http.post(path, json=good)
    assert created.status_code == 201 and "status" not in created.json()
    bad = {**good, "metadata": {"name": "w2"}, "spec": {"size": "big", "color": "green"}}
    r = http.post(path, json=bad)
    assert r.status_code == 422
    fields = {c["field"] for c in r.json()["details"]["causes"]}
    assert fields == {"spec.size", "spec.color"}
    missing = http.post(path, json={**good, "metadata": {"name": "w3"}, "spec": {}})
    assert {c["field"] for c in missing.json()["details"]["causes"]} == {"spec.size"}
    http.patch(f"{path}/w1/status", content=json.dumps({"status": {"ready": "yes"}}),
               headers={"Content-Type": "application/merge-patch+json"})
    out = cluster.kubectl("get", "wd").stdout.splitlines()
    assert out[0].split() == ["NAME", "SIZE", "COLOR", "READY", "AGE"]
    assert out[1].split()[:4] == ["w1", "3", "red", "yes"]
    smp = http.patch(f"{path}/w1", content=b'{"spec":{"size":4}}',
                     headers={"Content-Type": "application/strategic-merge-patch+json"})
    assert smp.status_code == 415  # like Kubernetes: no strategic merge for custom resources
    assert "widget" in cluster.kubectl("explain", "widget.spec").stdout.lower()
    # Deleting the CRD removes its resources and stops serving them.
    http.delete("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com")
    assert http.get(path).status_code == 404
    again = http.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=WIDGETS)
    assert again.status_code == 201
    assert http.get(path).json()["items"] == []


def test_logical_clusters_are_isolated(cluster: Cluster, http: httpx.Client,
                                       tmp_path: Path) -> None:
    with http_client(cluster.server, cluster="team-a") as a, \
            http_client(cluster.server, cluster="team-b") as b:
        assert a.get("/api/v1/namespaces/default").status_code == 200  # bootstrapped
        assert a.post("/api/v1/namespaces", json={"metadata": {"name": "only-a"}}
                      ).status_code == 201
        assert b.get("/api/v1/namespaces/only-a").status_code == 404
        assert http.get("/api/v1/namespaces/only-a").status_code == 404
        crd = {**WIDGETS, "metadata": {"name": "gadgets.example.com"},
               "spec": {**WIDGETS["spec"], "names": {"plural": "gadgets", "kind": "Gadget"}}}
        assert a.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                      json=crd).status_code == 201
        assert a.get("/apis/example.com/v1/namespaces/default/gadgets").status_code == 200
        assert b.get("/apis/example.com/v1/namespaces/default/gadgets").status_code == 404
        # Queues of one logical cluster are not those of another.
        q = {"metadata": {"name": "tenant-q"}, "spec": {"resources": {"gpu": {"quota": 1}}}}
        assert a.post("/apis/scheduling.run.ai/v2/queues", json=q).status_code == 201
        assert b.get("/apis/scheduling.run.ai/v2/queues/tenant-q").status_code == 404
    kubeconfig = cluster.server.write_kubeconfig(tmp_path / "a.kubeconfig", cluster="team-a")
    out = cluster.kubectl("get", "ns", kubeconfig=kubeconfig).stdout
    assert "only-a" in out
    assert "only-a" not in cluster.kubectl("get", "ns").stdout


def test_rbac_cluster_roles_and_resource_names(cluster: Cluster, http: httpx.Client) -> None:
    cluster.server.tokens.add("dave-token", "dave", ["readers"])
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    http.post(f"{rbac}/clusterroles", json={"metadata": {"name": "queue-reader"}, "rules": [
        {"apiGroups": ["scheduling.run.ai"], "resources": ["queues"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"],
         "resourceNames": ["visible"]}]})
    http.post(f"{rbac}/clusterrolebindings", json={
        "metadata": {"name": "readers"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                                     "kind": "ClusterRole",
                                                     "name": "queue-reader"},
        "subjects": [{"kind": "Group", "name": "readers",
                      "apiGroup": "rbac.authorization.k8s.io"}]})
    for name in ("visible", "hidden"):
        http.post("/api/v1/namespaces/default/configmaps", json={"metadata": {"name": name}})
    with http_client(cluster.server, token="dave-token") as dave:
        assert dave.get("/apis/scheduling.run.ai/v2/queues").status_code == 200
        denied = dave.delete("/apis/scheduling.run.ai/v2/queues/anything")
        assert denied.status_code == 403
        body = denied.json()
        assert body["kind"] == "Status" and body["reason"] == "Forbidden"
        assert 'User "dave" cannot delete resource "queues"' in body["message"]
        assert dave.get("/api/v1/namespaces/default/configmaps/visible").status_code == 200
        assert dave.get("/api/v1/namespaces/default/configmaps/hidden").status_code == 403
        assert dave.get("/api/v1/namespaces/default/configmaps").status_code == 403
        # Discovery stays readable to every authenticated user.
        assert dave.get("/apis").status_code == 200


def test_tokens_can_be_limited_to_logical_clusters(cluster: Cluster) -> None:
    cluster.server.tokens.add("erin-token", "erin", ["system:masters"], clusters=["team-e"])
    with http_client(cluster.server, token="erin-token", cluster="team-e") as own:
        assert own.get("/api/v1/namespaces").status_code == 200
    with http_client(cluster.server, token="erin-token", cluster="root") as other:
        # the root cluster named in the path: refused
        assert other.get("/clusters/root/api/v1/namespaces").status_code == 401
        # no prefix at all (kubectl get --raw): served in the token's own cluster, so
        # nothing of the root cluster is seen
        with http_client(cluster.server) as admin:
            admin.post("/api/v1/namespaces", json={"metadata": {"name": "root-only-e"}})
        names = {n["metadata"]["name"] for n in other.get("/api/v1/namespaces").json()["items"]}
        assert "root-only-e" not in names
    with http_client(cluster.server, token="erin-token", cluster="team-f") as elsewhere:
        assert elsewhere.get("/api/v1/namespaces").status_code == 401


def test_aggregated_discovery(http: httpx.Client) -> None:
    accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    r = http.get("/apis", headers={"Accept": accept})
    assert r.headers["content-type"].startswith("application/json;g=apidiscovery.k8s.io;v=v2")
    groups = {g["metadata"]["name"]: g for g in r.json()["items"]}
    queues = next(res for res in groups["scheduling.run.ai"]["versions"][0]["resources"]
                  if res["resource"] == "queues")
    assert queues["scope"] == "Cluster" and queues["shortNames"] == ["q"]
    legacy = http.get("/apis", headers={"Accept": "application/json"}).json()
    assert legacy["kind"] == "APIGroupList"
    core = http.get("/api", headers={"Accept": accept}).json()
    pods = next(res for res in core["items"][0]["versions"][0]["resources"]
                if res["resource"] == "pods")
    assert {s["subresource"] for s in pods["subresources"]} == {
        "status", "binding", "log", "eviction", "exec", "attach", "portforward"}


def test_watch_of_one_cluster_sees_only_its_objects(cluster: Cluster) -> None:
    with http_client(cluster.server, cluster="watch-a") as a, \
            http_client(cluster.server, cluster="watch-b") as b:
        rv = a.get("/api/v1/namespaces/default/configmaps").json()["metadata"][
            "resourceVersion"]
        b.post("/api/v1/namespaces/default/configmaps", json={"metadata": {"name": "in-b"}})
        a.post("/api/v1/namespaces/default/configmaps", json={"metadata": {"name": "in-a"}})
        time.sleep(0.1)
        with a.stream("GET", "/api/v1/namespaces/default/configmaps",
                      params={"watch": "true", "resourceVersion": rv,
                              "timeoutSeconds": "1"}) as w:
            names = [json.loads(line)["object"]["metadata"]["name"] for line in w.iter_lines()
                     if line]
        assert names == ["in-a"]


def test_only_admins_create_logical_clusters(cluster: Cluster) -> None:
    cluster.server.tokens.add("frank-token", "frank", [], ["frank-made"])
    with http_client(cluster.server, token="frank-token", cluster="frank-made") as frank:
        r = frank.get("/api/v1/namespaces")
        assert r.status_code == 404 and "does not exist" in r.json()["message"]
    assert "frank-made" not in cluster.server.api.registries
