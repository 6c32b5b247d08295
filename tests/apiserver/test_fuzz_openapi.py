"""A bounded fuzz of the server from its own OpenAPI document: every operation it
publishes (picked in a fixed order, a bounded number of examples each) is called with
generated names, query parameters and bodies (random JSON, and objects shaped like the
kind's with random fields) in every content type; no answer may be a 500 and the server
must keep answering. Hypothesis, derandomized: the same examples on every run."""

from __future__ import annotations

import json
import string
from collections.abc import Iterator
from typing import Any

import pytest
from apiserver_harness import http_client
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from gpushare.apiserver.http.server import ApiServer
from gpushare.cli.compose import api_server

# Methods and patch content types that the fuzz sends to every path (not only the ones
# the document lists: a method a path does not take must be refused, not crash).
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
CONTENT_TYPES = ("application/json", "application/merge-patch+json",
                 "application/json-patch+json", "application/strategic-merge-patch+json",
                 "application/apply-patch+yaml", "application/yaml", "text/plain")
MAX_OPERATIONS = 120
EXAMPLES = 400


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    srv = api_server(tmp_path_factory.mktemp("fuzz"), "127.0.0.1", 0)
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def operations(server: ApiServer) -> list[str]:
    """Path templates of the published documents, sorted; at most MAX_OPERATIONS, taken
    at an even stride so that a growing document keeps the run's size bounded."""
    with http_client(server) as c:
        root = c.get("/openapi/v3").json()
        paths: set[str] = set()
        for entry in root["paths"].values():
            doc = c.get(entry["serverRelativeURL"]).json()
            paths.update(doc.get("paths") or {})
    ordered = sorted(paths)
    stride = max(1, len(ordered) // MAX_OPERATIONS)
    return ordered[::stride][:MAX_OPERATIONS]


names = st.one_of(st.sampled_from(["default", "fuzz", "kube-system", "x" * 64]),
                  st.text(string.ascii_lowercase + string.digits + "-.", min_size=1,
                          max_size=12),
                  st.text(st.characters(min_codepoint=0xA1, max_codepoint=0x2FF,
                                        exclude_characters="/?#%\x7f"), min_size=1, max_size=8))
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12))
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)),
    max_leaves=20)
FIELDS = ("spec", "status", "data", "rules", "subjects", "roleRef", "value",
          "containers", "selector", "template", "finalizers", "ownerReferences", "labels")
shaped = st.fixed_dictionaries({
    "metadata": st.one_of(json_values, st.fixed_dictionaries(
        {"name": names}, optional={k: json_values for k in (
            "labels", "annotations", "finalizers", "ownerReferences", "namespace",
            "resourceVersion", "generateName")})),
}, optional={k: json_values for k in FIELDS})
bodies = st.one_of(st.none(), json_values, shaped,
                   st.lists(st.fixed_dictionaries({"op": st.sampled_from(
                       ["add", "remove", "replace", "move", "copy", "test", "x"]),
                       "path": st.text(max_size=12), "value": json_values}), max_size=3))
queries = st.dictionaries(st.sampled_from([
    "watch", "resourceVersion", "resourceVersionMatch", "limit", "continue", "labelSelector",
    "fieldSelector", "timeoutSeconds", "dryRun", "fieldValidation", "propagationPolicy",
    "gracePeriodSeconds", "sendInitialEvents", "allowWatchBookmarks", "force",
    "fieldManager"]), st.text(max_size=10), max_size=3)


def _fill(template: str, draw: Any) -> str:
    out = []
    for part in template.split("/"):
        if part.startswith("{") and part.endswith("}"):
            out.append(draw(names))
        else:
            out.append(part)
    return "/".join(out)


@settings(max_examples=EXAMPLES, derandomize=True, database=None,
          phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.data())
def test_no_operation_answers_500(server: ApiServer, operations: list[str],
                                  data: st.DataObject) -> None:
    template = data.draw(st.sampled_from(operations), label="path")
    path = _fill(template, data.draw)
    method = data.draw(st.sampled_from(METHODS), label="method")
    query = data.draw(queries, label="query")
    if query.get("watch"):
        query["timeoutSeconds"] = "1"
    headers = {}
    content = None
    if method in ("POST", "PUT", "PATCH", "DELETE"):
        ctype = data.draw(st.sampled_from(CONTENT_TYPES), label="content-type")
        body = data.draw(bodies, label="body")
        headers["Content-Type"] = ctype
        content = b"" if body is None else json.dumps(body).encode()
    with http_client(server) as c:
        r = c.request(method, path, params=query, content=content, headers=headers,
                      timeout=20)
        assert r.status_code < 500, (method, path, query, content, r.status_code, r.text)
        assert c.get("/version").status_code == 200


# -- wrong types inside nested fields ----------------------------------------------------------

# (path, group, version, kind) of bodies the server reads: creates of built-in kinds and
# the subresources and reviews whose bodies are read directly.
TYPED_TARGETS = [
    ("/api/v1/namespaces/default/pods", "", "v1", "Pod"),
    ("/api/v1/namespaces/default/configmaps", "", "v1", "ConfigMap"),
    ("/api/v1/namespaces/default/services", "", "v1", "Service"),
    ("/apis/apps/v1/namespaces/default/deployments", "apps", "v1", "Deployment"),
    ("/apis/batch/v1/namespaces/default/jobs", "batch", "v1", "Job"),
    ("/apis/rbac.authorization.k8s.io/v1/clusterroles", "rbac.authorization.k8s.io", "v1",
     "ClusterRole"),
    ("/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
     "rbac.authorization.k8s.io", "v1", "RoleBinding"),
    ("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "apiextensions.k8s.io", "v1",
     "CustomResourceDefinition"),
    ("/api/v1/namespaces/default/pods/typed/binding", "", "v1", "Binding"),
    ("/api/v1/namespaces/default/pods/typed/eviction", "policy", "v1", "Eviction"),
    ("/apis/apps/v1/namespaces/default/deployments/typed/scale", "autoscaling", "v1", "Scale"),
    ("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "authorization.k8s.io", "v1",
     "SelfSubjectAccessReview"),
    ("/apis/authorization.k8s.io/v1/subjectaccessreviews", "authorization.k8s.io", "v1",
     "SubjectAccessReview"),
    ("/api/v1/namespaces/default/pods/typed", "meta", "v1", "DeleteOptions"),
]
WRONG = {"object": ["x", 5, [1]], "array": ["x", {"a": 1}, 5], "string": [5, {"a": 1}, [1]],
         "integer": ["x", {"a": 1}, [1], 1.5], "number": ["x", [1]], "boolean": ["x", 5]}


def _kind_of(schema: dict) -> str | None:
    kind = schema.get("type")
    return "object" if kind is None and "properties" in schema else kind


@st.composite
def wrong_typed(draw: Any, target: tuple[str, str, str, str]) -> dict:
    """A body of the target's kind with one value of a wrong JSON type, nested 1-5 deep."""
    from gpushare.apiserver.schema import schemas

    _path, group, version, kind = target
    schema = schemas.kind_schema(group, version, kind)
    body: dict = {"metadata": {"name": "typed"}} if kind not in ("DeleteOptions",) else {}
    node: Any = body
    sch: Any = schema
    for depth in range(draw(st.integers(1, 5))):
        sch = schemas.resolve(sch)
        props = (sch or {}).get("properties") or {}
        keys = sorted(k for k, v in props.items()
                      if _kind_of(schemas.resolve(v) or {}) in WRONG and k not in
                      ("apiVersion", "kind"))
        if not keys:
            break
        key = draw(st.sampled_from(keys), label=f"field{depth}")
        child = schemas.resolve(props[key]) or {}
        kind_here = _kind_of(child)
        last = depth == 4 or draw(st.booleans(), label=f"stop{depth}")
        if last or kind_here not in ("object", "array"):
            if child.get("format") in ("int-or-string", "quantity"):
                node[key] = {"a": 1}
            else:
                node[key] = draw(st.sampled_from(WRONG[str(kind_here)]), label="wrong")
            break
        if kind_here == "array":
            item = schemas.items(child)
            item_kind = _kind_of(schemas.resolve(item) or {}) if item else None
            if item_kind != "object":
                node[key] = [draw(st.sampled_from(WRONG.get(str(item_kind), ["x"])))] \
                    if item_kind in WRONG else "x"
                break
            node[key] = [{}]
            node, sch = node[key][0], item
        else:
            node[key] = node.get(key) if isinstance(node.get(key), dict) else {}
            node, sch = node[key], child
    return body


@settings(max_examples=EXAMPLES, derandomize=True, database=None,
          phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.data())
def test_wrong_types_inside_nested_fields_never_answer_500(server: ApiServer,
                                                           data: st.DataObject) -> None:
    target = data.draw(st.sampled_from(TYPED_TARGETS), label="target")
    body = data.draw(wrong_typed(target), label="body")
    method = ("DELETE" if target[3] == "DeleteOptions" else
              "PUT" if target[3] == "Scale" else "POST")
    with http_client(server) as c:
        if not getattr(server, "_typed_seeded", False):
            c.post("/api/v1/namespaces/default/pods", json={"metadata": {"name": "typed"},
                   "spec": {"containers": [{"name": "c", "image": "x"}]}})
            c.post("/apis/apps/v1/namespaces/default/deployments", json={
                "metadata": {"name": "typed"}, "spec": {
                    "selector": {"matchLabels": {"a": "b"}}, "template": {
                        "metadata": {"labels": {"a": "b"}},
                        "spec": {"containers": [{"name": "c", "image": "x"}]}}}})
            server._typed_seeded = True  # type: ignore[attr-defined]
        r = c.request(method, target[0], json=body, timeout=20)
        assert r.status_code < 500, (method, target[0], body, r.status_code, r.text)
        assert c.get("/version").status_code == 200
