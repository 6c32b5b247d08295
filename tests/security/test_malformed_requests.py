"""Attack: bodies with a wrong JSON type deep inside (a Binding's target a string, a
DeleteOptions' grace period a list, a CRD's properties a string, a `!!binary` YAML value)
failed deep in the server with 500 InternalError (a stack trace's worth of detail, and a
crash path anyone with write access can hit). Each is now refused at decoding, 400 with a
Status naming the field; the server keeps serving."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from apiserver_proc import start, stop

POD = "/api/v1/namespaces/default/pods/p"
SCALE = "/apis/apps/v1/namespaces/default/deployments/d/scale"
SSAR = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def _crd(name: str, **spec: object) -> dict:
    base = {"group": "x.io", "scope": "Namespaced",
            "names": {"plural": name, "kind": name.title()},
            "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
                "openAPIV3Schema": {"type": "object"}}}]}
    return {"metadata": {"name": f"{name}.x.io"}, "spec": {**base, **spec}}


CASES = [
    ("POST", f"{POD}/binding", {"target": "box"}, "target"),
    ("POST", f"{POD}/binding", {"target": {"name": 5}}, "target.name"),
    ("POST", f"{POD}/binding", {"metadata": "x", "target": {"name": "n"}}, "metadata"),
    ("POST", f"{POD}/eviction", {"deleteOptions": "x"}, "deleteOptions"),
    ("POST", f"{POD}/eviction", {"deleteOptions": {"gracePeriodSeconds": "x"}},
     "deleteOptions.gracePeriodSeconds"),
    ("POST", f"{POD}/eviction", {"deleteOptions": {"preconditions": "x"}},
     "deleteOptions.preconditions"),
    ("PUT", SCALE, {"spec": "x"}, "spec"),
    ("PUT", SCALE, {"metadata": "x", "spec": {"replicas": 1}}, "metadata"),
    ("POST", SSAR, {"spec": "x"}, "spec"),
    ("POST", SSAR, {"spec": {"resourceAttributes": "x"}}, "spec.resourceAttributes"),
    ("POST", SSAR, {"spec": {"resourceAttributes": {"verb": 5}}},
     "spec.resourceAttributes.verb"),
    ("DELETE", POD, {"gracePeriodSeconds": "x"}, "gracePeriodSeconds"),
    ("DELETE", POD, {"gracePeriodSeconds": [1]}, "gracePeriodSeconds"),
    ("DELETE", POD, {"preconditions": "x"}, "preconditions"),
    ("DELETE", POD, {"preconditions": {"resourceVersion": 5}}, "preconditions.resourceVersion"),
    ("DELETE", "/api/v1/namespaces/default/pods", {"gracePeriodSeconds": "x"},
     "gracePeriodSeconds"),
    ("POST", CRDS, _crd("as", versions=[{"name": "v1", "served": True, "storage": True,
                                         "schema": {"openAPIV3Schema": {
                                             "type": "object", "properties": "x"}}}]),
     "spec.versions[0].schema.openAPIV3Schema.properties"),
    ("POST", CRDS, _crd("bs", names="x"), "spec.names"),
]

YAML_CASES = [
    ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: y1}\ndata: {k: !!binary aGVsbG8=}\n",
     "!!binary"),
    ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: y2, labels: {!!binary YQ==: b}}\n",
     "!!binary"),
    ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: !!binary eTI=}\n", "!!binary"),
]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    proc, client = start(tmp_path_factory.mktemp("malformed"))
    assert client.post("/api/v1/namespaces/default/pods", json={
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "x"}]}}).status_code == 201
    template = {"metadata": {"labels": {"a": "b"}},
                "spec": {"containers": [{"name": "c", "image": "x"}]}}
    assert client.post("/apis/apps/v1/namespaces/default/deployments", json={
        "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": template}}
    ).status_code == 201
    yield client
    stop(proc, client)


def _refused(r: httpx.Response, field: str) -> None:
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    status = r.json()
    assert status["kind"] == "Status" and status["status"] == "Failure", status
    assert field in status["message"], status["message"]


@pytest.mark.parametrize(("method", "path", "body", "field"), CASES,
                         ids=[f"{c[0]}-{c[3]}" for c in CASES])
def test_a_wrong_type_inside_a_body_is_a_4xx_naming_the_field(
        client: httpx.Client, method: str, path: str, body: dict, field: str) -> None:
    _refused(client.request(method, path, json=body), field)
    assert client.get("/api/v1/namespaces/default/pods/p").status_code == 200
    node = client.get("/api/v1/namespaces/default/pods/p").json()["spec"].get("nodeName")
    assert node is None  # nothing half-done: no binding, no deletion


@pytest.mark.parametrize(("text", "field"), YAML_CASES)
def test_yaml_binary_values_are_a_4xx(client: httpx.Client, text: str, field: str) -> None:
    r = client.post("/api/v1/namespaces/default/configmaps", content=text,
                    headers={"Content-Type": "application/yaml"})
    _refused(r, field)


@pytest.mark.parametrize("token", ["garbage", "eyJ4Ijo1fQ", "W10", "eyJydiI6IngifQ"])
def test_forged_continue_tokens_are_a_4xx(client: httpx.Client, token: str) -> None:
    r = client.get("/api/v1/pods", params={"limit": "1", "continue": token})
    _refused(r, "continue")
