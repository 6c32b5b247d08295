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
