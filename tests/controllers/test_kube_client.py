"""The client layer: the token-refresh hook throttle, paths of resources, the requests sent."""

from __future__ import annotations

import http.server
import threading
from typing import ClassVar

import orjson
import pytest
from kubernetes import client as k8s_client

from gpushare.kube.client import JOBS, NODES, QUEUES, ApiError, KubeClient, _throttled


def test_refresh_hook_runs_at_most_once_per_period_and_survives_reinstalling_itself():
    configuration = k8s_client.Configuration()
    calls = []

    def loader_hook(cfg):
        calls.append(1)
        cfg.refresh_api_key_hook = loader_hook  # the kubeconfig loader reinstalls itself

    configuration.refresh_api_key_hook = _throttled(loader_hook)
    for _ in range(100):
        configuration.refresh_api_key_hook(configuration)
    assert len(calls) == 1
    assert configuration.refresh_api_key_hook is not loader_hook
    assert _throttled(None) is None


def test_resource_paths():
    assert JOBS.item("j", "ns", "status") == "/apis/batch/v1/namespaces/ns/jobs/j/status"
    assert NODES.item("n") == "/api/v1/nodes/n"
    assert QUEUES.collection() == "/apis/scheduling.run.ai/v2/queues"


def test_an_object_path_without_a_name_is_refused_not_the_collection():
    for call in (lambda: NODES.item(""), lambda: JOBS.item("", "ns", "status")):
        with pytest.raises(ValueError, match=r"needs its metadata\.name"):
            call()


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Answers every request with a fixed JSON body and remembers what it was sent."""

    seen: ClassVar[list[tuple[str, str, dict[str, str], bytes]]] = []
    status = 200

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        type(self).seen.append((self.command, self.path, headers, body))
        payload = b'{"kind": "Status", "message": "no such pod"}'
        self.send_response(type(self).status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PATCH = do_DELETE = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def recorder():
    _Recorder.seen = []
    _Recorder.status = 200
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    configuration = k8s_client.Configuration()
    configuration.host = f"http://127.0.0.1:{server.server_address[1]}"
    configuration.api_key = {"authorization": "secret-token"}
    configuration.api_key_prefix = {"authorization": "Bearer"}
    client = KubeClient(k8s_client.ApiClient(configuration))
    yield client
    client.close()
    server.shutdown()
    server.server_close()


def test_requests_carry_the_token_body_type_and_encoded_query(recorder):
    recorder.merge_patch("/api/v1/namespaces/ns/pods/p", {"metadata": {"labels": {"a": "b"}}})
    recorder.list("/api/v1/pods", fieldSelector="spec.nodeName=n 1", watch=False, limit=5)
    recorder.create("/api/v1/namespaces/ns/pods", {"metadata": {"name": "p"}})
    (patch_m, patch_path, patch_h, patch_body), (list_m, list_path, list_h, list_body), (
        post_m, _, post_h, post_body) = _Recorder.seen
    assert (patch_m, patch_path) == ("PATCH", "/api/v1/namespaces/ns/pods/p")
    assert patch_h["content-type"] == "application/merge-patch+json"
    assert orjson.loads(patch_body) == {"metadata": {"labels": {"a": "b"}}}
    assert list_m == "GET" and list_body == b"" and "content-type" not in list_h
    assert list_path == "/api/v1/pods?fieldSelector=spec.nodeName%3Dn%201&watch=false&limit=5"
    assert post_m == "POST" and post_h["content-type"] == "application/json"
    assert orjson.loads(post_body) == {"metadata": {"name": "p"}}
    for headers in (patch_h, list_h, post_h):
        assert headers["authorization"] == "Bearer secret-token"
        assert headers["accept"] == "application/json"
        assert headers["user-agent"].startswith("OpenAPI-Generator/")


def test_a_non_2xx_answer_is_an_api_error_with_the_server_message(recorder):
    _Recorder.status = 404
    assert recorder.get("/api/v1/namespaces/ns/pods/p") is None
    with pytest.raises(ApiError) as caught:
        recorder.merge_patch("/api/v1/namespaces/ns/pods/p", {})
    assert caught.value.not_found and "no such pod" in str(caught.value)


def test_a_logical_cluster_client_stays_there_after_the_token_refresh(tmp_path, monkeypatch):
    """The loader's refresh re-reads the kubeconfig, server address included: a client of
    ``/clusters/<name>`` must keep talking to that cluster (before, it fell back to the
    root cluster after TOKEN_REFRESH_SECONDS, where a tenant-only token is refused)."""
    import yaml

    from gpushare.kube import client as kube_client

    _Recorder.seen = []
    _Recorder.status = 200
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {
            "server": f"http://127.0.0.1:{server.server_address[1]}"}}],
        "users": [{"name": "u", "user": {"token": "tenant-token"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    monkeypatch.setattr(kube_client, "TOKEN_REFRESH_SECONDS", 0.0)  # refresh every request
    c = KubeClient.from_kubeconfig(str(path), cluster="team-a")
    try:
        for _ in range(3):
            c.list("/api/v1/pods")
    finally:
        c.close()
        server.shutdown()
        server.server_close()
    paths = [seen[1] for seen in _Recorder.seen]
    assert len(paths) == 3
    assert all(p.startswith("/clusters/team-a/api/v1/pods") for p in paths), paths
    assert all(seen[2]["authorization"] == "Bearer tenant-token" for seen in _Recorder.seen)
