"""A bounded schemathesis run against the server's own OpenAPI v3 documents (every
group-version's, merged into one): cases generated from the published schemas, valid and
invalid, for a fixed stride of its operations; no answer may be a 500 and the server must
keep answering. Derandomized: the same cases on every run (see also test_fuzz_openapi.py,
which sends what the documents do not describe)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from apiserver_harness import http_client
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.schemas import APIOperation

from gpushare.apiserver.http.server import ApiServer
from gpushare.cli.compose import api_server

EXAMPLES = 75
STRIDE = 3  # every third operation of the sorted list: about 120 of the 358 today


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    srv = api_server(tmp_path_factory.mktemp("schemathesis"), "127.0.0.1", 0)
    srv.start()
    yield srv
    srv.stop()


def _document(server: ApiServer) -> dict[str, Any]:
    """The server's OpenAPI v3 documents as one (their paths and schemas do not overlap)."""
    paths: dict[str, Any] = {}
    components: dict[str, Any] = {}
    with http_client(server) as c:
        root = c.get("/openapi/v3")
        assert root.status_code == 200, root.text
        for entry in root.json()["paths"].values():
            doc = c.get(entry["serverRelativeURL"]).json()
            paths.update(doc["paths"])
            components.update(doc["components"]["schemas"])
    return {"openapi": "3.0.0", "info": {"title": "gpushare", "version": "v1.32.0"},
            "paths": paths, "components": {"schemas": components}}


@pytest.fixture(scope="module")
def operations(server: ApiServer) -> list[APIOperation]:
    schema = schemathesis.openapi.from_dict(_document(server))
    ops = sorted((result.ok() for result in schema.get_all_operations()),
                 key=lambda op: (op.path, op.method))
    assert len(ops) > 300  # every kind's collection, item and status operations
    return ops[::STRIDE]


@settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
          phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(st.data())
def test_no_generated_case_answers_500(server: ApiServer, operations: list[APIOperation],
                                       data: st.DataObject) -> None:
    op = data.draw(st.sampled_from(operations), label="operation")
    mode = data.draw(st.sampled_from([GenerationMode.POSITIVE, GenerationMode.NEGATIVE]),
                     label="mode")
    case = data.draw(op.as_strategy(generation_mode=mode), label="case")
    headers = {"Authorization": f"Bearer {server.admin_token}"}
    if case.query and case.query.get("watch"):
        case.query["timeoutSeconds"] = "1"
    response = case.call(base_url=server.url, headers=headers, verify=str(server.ca_path),
                         timeout=20)
    assert response.status_code < 500, (case.method, case.formatted_path, case.query,
                                        case.body, response.status_code, response.text)
    with http_client(server) as c:
        assert c.get("/version").status_code == 200
