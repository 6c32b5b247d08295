"""One bad object cannot take the system down: each is refused at the API with 422 naming
the field, and when one is in the store anyway (stored before validation, or by an older
version: these tests put them there directly) every reader skips it and goes on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from apiserver_harness import Cluster, http_client

from gpushare.apiserver.http.server import ApiServer
from gpushare.apiserver.storage.store import Store
from gpushare.cli.compose import api_server

RBAC = "rbac.authorization.k8s.io"


def _cm(name: str, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", **meta}}


def _pod(name: str, spec: dict[str, Any] | None = None, status: Any = None) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}",
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": spec or {"containers": [{"name": "main", "image": "busybox"}]}}
    if status is not None:
        pod["status"] = status
    return pod


POISON: list[tuple[str, dict[str, Any]]] = [
    # deleted, with a finalizer no reader can read: stopped the next start
    ("configmaps", _cm("bad-finalizer", finalizers=[{}],
                       deletionTimestamp="2026-01-01T00:00:00Z")),
    ("configmaps", _cm("bad-owner", ownerReferences=["x", {"uid": 7}])),
    ("configmaps", _cm("bad-labels", labels="x")),
    ("pods", _pod("bad-status", status={"phase": ["Running"], "conditions": "x",
                                        "containerStatuses": [1, 2]})),
    ("pods", _pod("bad-spec", spec={"containers": "x", "initContainers": "x"})),
    (f"{RBAC}/rolebindings", {"apiVersion": f"{RBAC}/v1", "kind": "RoleBinding",
                              "metadata": {"name": "bad", "namespace": "default"},
                              "subjects": "x", "roleRef": "y"}),
    (f"{RBAC}/roles", {"apiVersion": f"{RBAC}/v1", "kind": "Role",
                       "metadata": {"name": "bad", "namespace": "default"},
                       "rules": ["x", {"verbs": "*", "apiGroups": "*", "resources": "*"}]}),
    ("apiextensions.k8s.io/customresourcedefinitions", {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "bads.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "bads", "kind": "Bad", "singular": "bad"},
                 "versions": [{"name": "v1", "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": {
                                   "type": "object", "properties": "x"}}}]}}),
]


@pytest.fixture(scope="module")
def poisoned(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    data = tmp_path_factory.mktemp("poisoned")
    first = api_server(data, "127.0.0.1", 0)  # bootstrap, then stop
    first.start()
    first.stop()
    store = Store(data / "state.db")
    for gr, obj in POISON:
        store.put("root", gr, orjson.loads(orjson.dumps(obj)))
    store.close()
    server = api_server(data, "127.0.0.1", 0, bookmark_interval=0.5)  # must start
    server.start()
    try:
        yield Cluster(server, data / "admin.kubeconfig", data / "kubectl-cache")
    finally:
        server.stop()


def test_the_server_starts_and_serves_everything_else(poisoned: Cluster) -> None:
    c = http_client(poisoned.server)
    assert c.get("/readyz").status_code == 200
    names = {o["metadata"]["name"] for o in c.get(
        "/api/v1/namespaces/default/configmaps").json()["items"]}
    assert {"bad-finalizer", "bad-owner", "bad-labels"} <= names
    assert c.post("/api/v1/namespaces/default/configmaps",
                  json={"metadata": {"name": "fine"}}).status_code == 201
    c.close()


def test_kubectl_get_pods_all_namespaces_survives_a_malformed_pod(poisoned: Cluster) -> None:
    done = poisoned.kubectl("get", "pods", "-A")
    assert "bad-status" in done.stdout and "bad-spec" in done.stdout


def test_rbac_evaluation_survives_malformed_bindings_and_rules(poisoned: Cluster) -> None:
    server = poisoned.server
    token = "alice-token-poison"
    server.tokens.add(token, "alice", [])
    c = http_client(server, token)
    r = c.get("/api/v1/namespaces/default/configmaps")
    assert r.status_code == 403, r.text  # not 500, and the string "*" grants nothing
    admin = http_client(server)
    assert admin.post(f"/apis/{RBAC}/v1/namespaces/default/roles", json={
        "metadata": {"name": "read"},
        "rules": [{"verbs": ["list"], "apiGroups": [""], "resources": ["configmaps"]}]},
    ).status_code == 201
    assert admin.post(f"/apis/{RBAC}/v1/namespaces/default/rolebindings", json={
        "metadata": {"name": "alice-read"}, "subjects": [{"kind": "User", "name": "alice"}],
        "roleRef": {"kind": "Role", "name": "read", "apiGroup": RBAC}}).status_code == 201
    assert c.get("/api/v1/namespaces/default/configmaps").status_code == 200
    c.close()
    admin.close()


def test_openapi_survives_a_malformed_crd_schema(poisoned: Cluster) -> None:
    c = http_client(poisoned.server)
    root = c.get("/openapi/v3")
    assert root.status_code == 200
    for path in ("/openapi/v3/apis/example.com/v1", "/openapi/v3/api/v1", "/openapi/v2"):
        assert c.get(path).status_code == 200, path
    done = poisoned.kubectl("apply", "-f", "-", stdin=(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: applied, namespace: default}\n"))
    assert "applied" in done.stdout
    c.close()


def test_the_garbage_collector_skips_what_it_cannot_handle(
        poisoned: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    c = http_client(poisoned.server)
    owner = c.post("/api/v1/namespaces/default/configmaps",
                   json={"metadata": {"name": "owner"}}).json()
    dep = {"metadata": {"name": "dependent", "ownerReferences": [{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
        "uid": owner["metadata"]["uid"]}]}}
    assert c.post("/api/v1/namespaces/default/configmaps", json=dep).status_code == 201
    assert c.delete("/api/v1/namespaces/default/configmaps/owner").status_code == 200
    import time
    deadline = time.monotonic() + 10
    while c.get("/api/v1/namespaces/default/configmaps/dependent").status_code != 404:
        assert time.monotonic() < deadline, "the collector stopped"
        time.sleep(0.05)
    c.close()


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    server = api_server(tmp_path_factory.mktemp("validation"), "127.0.0.1", 0)
    server.start()
    yield server
    server.stop()


REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("/api/v1/namespaces/default/configmaps",
     {"metadata": {"name": "f", "finalizers": [{}]}}, "metadata.finalizers[0]"),
    ("/api/v1/namespaces/default/configmaps",
     {"metadata": {"name": "f2", "finalizers": ["has space"]}}, "metadata.finalizers[0]"),
    ("/api/v1/namespaces/default/configmaps",
     {"metadata": {"name": "o", "ownerReferences": ["x"]}}, "metadata.ownerReferences[0]"),
    ("/api/v1/namespaces/default/configmaps",
     {"metadata": {"name": "o2", "ownerReferences": [{"kind": "X", "name": "y",
                                                      "apiVersion": "v1"}]}},
     "metadata.ownerReferences[0].uid"),
    ("/api/v1/namespaces/default/pods",
     {"metadata": {"name": "m"}, "spec": {"containers": [{
         "name": "main", "image": "busybox",
         "resources": {"requests": {"memory": "1e400"}}}]}},
     "spec.containers[0].resources.requests[memory]"),
    ("/api/v1/namespaces/default/pods",
     {"metadata": {"name": "i"}, "spec": {"initContainers": "x", "containers": [
         {"name": "main", "image": "busybox"}]}}, "spec.initContainers"),
    ("/api/v1/namespaces/default/pods",
     {"metadata": {"name": "e"}, "spec": {"containers": [
         {"name": "main", "image": "busybox", "env": ["x"], "command": "sh"}]}},
     "spec.containers[0].env[0]"),
    (f"/apis/{RBAC}/v1/namespaces/default/rolebindings",
     {"metadata": {"name": "rb"}, "subjects": "x",
      "roleRef": {"kind": "Role", "name": "r", "apiGroup": RBAC}}, "subjects"),
    (f"/apis/{RBAC}/v1/namespaces/default/rolebindings",
     {"metadata": {"name": "rb2"}, "subjects": [{"kind": "Robot", "name": "x"}],
      "roleRef": {"kind": "Role", "name": "r", "apiGroup": RBAC}}, "subjects[0].kind"),
    (f"/apis/{RBAC}/v1/namespaces/default/roles",
     {"metadata": {"name": "r"}, "rules": [{"verbs": "*"}]}, "rules[0].verbs"),
    ("/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
     {"metadata": {"name": "things.example.com"},
      "spec": {"group": "example.com", "scope": "Namespaced",
               "names": {"plural": "things", "kind": "Thing"},
               "versions": [{"name": "v1", "served": True, "storage": True,
                             "schema": {"openAPIV3Schema": {
                                 "type": "object",
                                 "properties": {"spec": {"properties": {
                                     "size": {"$ref": "#/x"}}}}}}}]}},
     "spec.versions[0].schema.openAPIV3Schema.properties[spec].type"),
]


@pytest.mark.parametrize(("path", "body", "field"), REFUSED,
                         ids=[f for _, _, f in REFUSED])
def test_poison_is_refused_with_422_naming_the_field(fresh: ApiServer, path: str,
                                                      body: dict[str, Any], field: str) -> None:
    with http_client(fresh) as c:
        r = c.post(path, json=body)
    assert r.status_code == 422, r.text
    fields = [cause["field"] for cause in r.json()["details"]["causes"]]
    assert field in fields, fields


def test_pod_status_shape_is_validated(fresh: ApiServer) -> None:
    with http_client(fresh) as c:
        assert c.post("/api/v1/namespaces/default/pods", json={
            "metadata": {"name": "s"},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]}}).status_code == 201
        r = c.patch("/api/v1/namespaces/default/pods/s/status",
                    json={"status": {"conditions": "x"}},
                    headers={"Content-Type": "application/merge-patch+json"})
    assert r.status_code == 422, r.text
    assert "status.conditions" in [cause["field"] for cause in r.json()["details"]["causes"]]


