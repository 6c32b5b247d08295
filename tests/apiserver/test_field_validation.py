"""Server-side field validation as kubectl meets it: `--validate=strict` (kubectl's
default) refuses typos, `warn` stores without them and says so, `ignore` drops them; in the
root cluster and inside a tenant's logical cluster."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from apiserver_harness import Cluster, http_client

TYPO_POD = """
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  anotations: {{team: a}}
spec:
  containers:
  - name: main
    image: busybox
    comand: ["sleep", "100"]
"""

TYPO_CM = """
apiVersion: v1
kind: ConfigMap
metadata: {{name: {name}}}
data: {{a: "1"}}
dta: {{b: "2"}}
"""


@pytest.fixture(scope="module", params=["root", "fv-tenant"])
def where(request: pytest.FixtureRequest, cluster: Cluster,
          tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """(logical cluster, a kubeconfig whose token holds only there)."""
    logical = request.param
    if logical == "root":
        return logical, cluster.kubeconfig
    with http_client(cluster.server, cluster=logical) as admin:
        assert admin.get("/api/v1/namespaces").status_code == 200  # brings it into being
        admin.post("/api/v1/namespaces", json={"metadata": {"name": "default"}})
    token = "fv-tenant-admin-token-0123456789"
    cluster.server.tokens.add(token, "tenant-admin", ["system:masters"], [logical])
    path = tmp_path_factory.mktemp("fv") / "tenant.kubeconfig"
    cluster.server.write_kubeconfig(path, token=token, cluster=logical)
    return logical, path


def test_strict_apply_refuses_typos_naming_each_field(cluster: Cluster,
                                                      where: tuple[str, Path]) -> None:
    logical, kubeconfig = where
    done = cluster.kubectl("apply", "-f", "-", stdin=TYPO_POD.format(name="typo"),
                           kubeconfig=kubeconfig, check=False)
    assert done.returncode != 0
    assert ('Error from server (BadRequest): error when creating "STDIN": Pod in version '
            '"v1" cannot be handled as a Pod: strict decoding error: unknown field '
            '"metadata.anotations", unknown field "spec.containers[0].comand"') in done.stderr
    gone = cluster.kubectl("get", "pod", "typo", kubeconfig=kubeconfig, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr, logical


def test_warn_stores_without_the_unknown_fields_and_warns(cluster: Cluster,
                                                          where: tuple[str, Path]) -> None:
    _logical, kubeconfig = where
    done = cluster.kubectl("apply", "--validate=warn", "-f", "-",
                           stdin=TYPO_POD.format(name="warned"), kubeconfig=kubeconfig)
    assert 'Warning: unknown field "metadata.anotations"' in done.stderr
    assert 'Warning: unknown field "spec.containers[0].comand"' in done.stderr
    pod = json.loads(cluster.kubectl("get", "pod", "warned", "-o", "json",
                                     kubeconfig=kubeconfig).stdout)
    assert "anotations" not in pod["metadata"]
    assert "comand" not in pod["spec"]["containers"][0]
    assert pod["spec"]["containers"][0]["image"] == "busybox"


def test_ignore_drops_silently(cluster: Cluster, where: tuple[str, Path]) -> None:
    _logical, kubeconfig = where
    done = cluster.kubectl("apply", "--validate=false", "-f", "-",
                           stdin=TYPO_CM.format(name="ignored"), kubeconfig=kubeconfig)
    assert "Warning" not in done.stderr
    cm = json.loads(cluster.kubectl("get", "configmap", "ignored", "-o", "json",
                                    kubeconfig=kubeconfig).stdout)
    assert cm["data"] == {"a": "1"} and "dta" not in cm


def test_strict_patch_of_an_existing_object_refuses_typos(cluster: Cluster,
                                                          where: tuple[str, Path]) -> None:
    _logical, kubeconfig = where
    cluster.kubectl("apply", "-f", "-", stdin=TYPO_CM.format(name="patched").replace(
        'dta: {b: "2"}\n', ""), kubeconfig=kubeconfig)
    done = cluster.kubectl("apply", "-f", "-", stdin=TYPO_CM.format(name="patched"),
                           kubeconfig=kubeconfig, check=False)
    assert done.returncode != 0
    assert 'strict decoding error: unknown field "dta"' in done.stderr


def test_strict_names_duplicate_fields_in_json(cluster: Cluster, where: tuple[str, Path],
                                               tmp_path: Path) -> None:
    _logical, kubeconfig = where  # `--raw` inside a tenant: its token finds its cluster
    body = ('{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dup",'
            ' "labels": {"a": "1", "a": "2"}}, "data": {"k": "v"}, "data": {"k": "w"}}')
    path = tmp_path / "dup.json"
    path.write_text(body)
    done = cluster.kubectl("create", "--raw",
                           "/api/v1/namespaces/default/configmaps?fieldValidation=Strict",
                           "-f", str(path), kubeconfig=kubeconfig, check=False)
    assert done.returncode != 0
    assert 'duplicate field "data"' in done.stderr
    assert 'duplicate field "metadata.labels.a"' in done.stderr
    warned = cluster.kubectl("create", "--raw",
                             "/api/v1/namespaces/default/configmaps?fieldValidation=Warn",
                             "-f", str(path), kubeconfig=kubeconfig)
    assert json.loads(warned.stdout)["data"] == {"k": "w"}  # the last one, as Kubernetes


def test_yaml_duplicates_name_the_line(cluster: Cluster) -> None:
    body = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ydup\ndata:\n  k: v\n  k: w\n"
    with http_client(cluster.server) as http:
        r = http.post("/api/v1/namespaces/default/configmaps?fieldValidation=Strict",
                      content=body, headers={"Content-Type": "application/yaml"})
        assert r.status_code == 400, r.text
        assert 'line 7: key "k" already set in map' in r.json()["message"]
        r = http.post("/api/v1/namespaces/default/configmaps?fieldValidation=Warn",
                      content=body, headers={"Content-Type": "application/yaml"})
        assert r.status_code == 201
        assert r.headers.get_list("warning") == ['299 - "line 7: key \\"k\\" already set in map"']


def test_custom_resources_and_builtins_answer_alike(cluster: Cluster) -> None:
    """A custom resource's unknown fields (metadata included) get the same answer."""
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "gadgets.example.com"},
           "spec": {"group": "example.com", "scope": "Namespaced",
                    "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                    "versions": [{"name": "v1", "served": True, "storage": True,
                                  "schema": {"openAPIV3Schema": {
                                      "type": "object", "properties": {"spec": {
                                          "type": "object",
                                          "properties": {"size": {"type": "integer"}}}}}}}]}}
    with http_client(cluster.server) as http:
        assert http.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                         json=crd).status_code == 201
        body = {"apiVersion": "example.com/v1", "kind": "Gadget",
                "metadata": {"name": "g1", "anotations": {}},
                "spec": {"size": 1, "colour": "red"}}
        path = "/apis/example.com/v1/namespaces/default/gadgets"
        r = _post_until_served(http, path + "?fieldValidation=Strict", body)
        assert r.status_code == 400
        assert r.json()["message"] == (
            'Gadget in version "v1" cannot be handled as a Gadget: strict decoding error: '
            'unknown field "metadata.anotations", unknown field "spec.colour"')
        r = http.post(path, json=body)  # no choice made: Warn, as Kubernetes
        assert r.status_code == 201
        assert r.json()["spec"] == {"size": 1}
        assert sorted(r.headers.get_list("warning")) == [
            '299 - "unknown field \\"metadata.anotations\\""',
            '299 - "unknown field \\"spec.colour\\""']


def test_an_unknown_mode_is_refused(cluster: Cluster) -> None:
    with http_client(cluster.server) as http:
        r = http.post("/api/v1/namespaces/default/configmaps?fieldValidation=Loose",
                      json={"metadata": {"name": "loose"}})
        assert r.status_code == 400 and "fieldValidation" in r.json()["message"]


def _post_until_served(http: httpx.Client, path: str, body: dict[str, object]) -> httpx.Response:
    import time

    deadline = time.monotonic() + 10
    while True:
        r = http.post(path, json=body)
        if r.status_code != 404 or time.monotonic() > deadline:
            return r
        time.sleep(0.1)


def test_server_side_apply_refuses_typos_too(cluster: Cluster, where: tuple[str, Path]) -> None:
    _logical, kubeconfig = where
    done = cluster.kubectl("apply", "--server-side", "-f", "-",
                           stdin=TYPO_POD.format(name="ssa-typo"), kubeconfig=kubeconfig,
                           check=False)
    assert done.returncode != 0
    assert 'unknown field "spec.containers[0].comand"' in done.stderr, done.stderr
    assert cluster.kubectl("get", "pod", "ssa-typo", kubeconfig=kubeconfig,
                           check=False).returncode != 0
