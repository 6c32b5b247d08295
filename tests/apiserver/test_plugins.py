"""The API server alone serves no other part of the product: tenancy and the dashboard are
plug-ins that the composing process (`gpushare.cli.compose`) hands to `ApiServer`."""

from __future__ import annotations

from pathlib import Path

from apiserver_harness import http_client

from gpushare.apiserver.http.server import ApiServer
from gpushare.cli.compose import api_server

VC_CRD = ("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
          "virtualclusters.tenancy.gpushare.io")


def test_a_bare_server_has_neither_tenancy_nor_the_dashboard(tmp_path: Path) -> None:
    with ApiServer(tmp_path) as server, http_client(server) as c:
        page = c.get("/dashboard")
        assert page.status_code == 404
        assert page.json()["reason"] == "NotFound"
        assert c.get(VC_CRD).status_code == 404
        assert c.get("/version").status_code == 200


def test_the_composed_server_has_both(tmp_path: Path) -> None:
    with api_server(tmp_path) as server, http_client(server) as c:
        page = c.get("/dashboard")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert c.get(VC_CRD).json()["spec"]["names"]["kind"] == "VirtualCluster"
        missing = c.get("/dashboard/nothing.js")  # the dashboard's own 404, as a Status
        assert missing.status_code == 404
        assert missing.json() == {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "the server could not find the requested resource",
            "reason": "NotFound", "code": 404, "details": {}}
