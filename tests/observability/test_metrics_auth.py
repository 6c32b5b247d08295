"""/metrics behind the API's auth: a token whose user may `get` the nonResourceURL
(system:monitoring), 401/403 otherwise, anybody only with --anonymous-metrics; the push
endpoints need `put` on theirs."""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx
import pytest

from gpushare.apiserver.http.server import ApiServer
from gpushare.cli.compose import api_server

PROM = b"# TYPE x_total counter\nx_total 1\n"


def _client(server: ApiServer, token: str | None) -> httpx.Client:
    assert server.ca_path is not None
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=server.url, headers=headers, timeout=10,
                        verify=ssl.create_default_context(cafile=str(server.ca_path)))


@pytest.fixture
def server(tmp_path: Path):
    with api_server(tmp_path / "api") as s:
        s.tokens.add("scraper-token", "prometheus", [])
        s.tokens.add("nobody-token", "nobody", [])
        yield s


def test_metrics_need_a_token_allowed_to_get_them(server):
    with _client(server, None) as anonymous:
        r = anonymous.get("/metrics")
        assert r.status_code == 401 and r.json()["reason"] == "Unauthorized"
        assert anonymous.get("/healthz").status_code == 200
    with _client(server, "nobody-token") as nobody:
        r = nobody.get("/metrics")
        assert r.status_code == 403 and '"/metrics"' in r.json()["message"]
    with _client(server, "scraper-token") as scraper:
        assert scraper.get("/metrics").status_code == 403
        with _client(server, server.admin_token) as admin:
            # the monitoring role ships with the server; binding it is the admin's choice
            role = admin.get("/apis/rbac.authorization.k8s.io/v1/clusterroles/"
                             "system:monitoring").json()
            assert role["rules"][0]["nonResourceURLs"][-1] == "/metrics"
            assert admin.get("/metrics").status_code == 200
            r = admin.post("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", json={
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": "prometheus"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": "system:monitoring"},
                "subjects": [{"kind": "User", "name": "prometheus"}]})
            assert r.status_code == 201, r.text
        r = scraper.get("/metrics")
        assert r.status_code == 200 and "apiserver_request_total" in r.text
        # reading is not pushing
        r = scraper.put("/metrics/components/fake/one", content=PROM)
        assert r.status_code == 403
    # host-wide figures are not served inside a logical cluster
    with _client(server, server.admin_token) as admin:
        assert admin.get("/clusters/team-a/metrics").status_code == 404


def test_anonymous_scrape_only_with_the_flag(tmp_path):
    with api_server(tmp_path / "api", anonymous_metrics=True) as s, _client(s, None) as c:
        r = c.get("/metrics")
        assert r.status_code == 200 and "apiserver_request_total" in r.text
        # the flag opens reading, not pushing
        assert c.put("/metrics/components/fake/one", content=PROM).status_code == 401


def test_a_push_shows_on_metrics_and_bad_ones_name_the_field(server):
    with _client(server, server.admin_token) as admin:
        r = admin.put("/metrics/components/fake/one?interval=5", content=PROM)
        assert r.status_code == 200 and r.json() == {"samples": 1}
        text = admin.get("/metrics").text
        assert 'x_total{component="fake",instance="one"} 1\n' in text
        r = admin.put("/metrics/components/fake/one?interval=never", content=PROM)
        assert r.status_code == 400 and r.json()["message"].startswith("interval")
        r = admin.put("/metrics/resource/node-a", content=b"{not json")
        assert r.status_code == 400 and r.json()["message"].startswith("body")
        r = admin.put("/metrics/resource/node-a", json={"timestamp": "t", "node": {}})
        assert r.status_code == 400 and r.json()["message"].startswith("node.cpu")
        assert admin.get("/apis/metrics.k8s.io/v1beta1/nodes").json()["items"] == []
        assert admin.put("/metrics/elsewhere/x", content=b"").status_code == 404
