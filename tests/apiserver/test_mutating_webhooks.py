"""MutatingWebhookConfigurations called by the API server: AdmissionReview v1 over HTTPS
checked against the caBundle, the JSONPatch applied, failurePolicy, timeoutSeconds, rules
and namespaceSelector. The webhook is gpushare's own GPU-fraction webhook (real HTTPS
server); a silent one stands in for a webhook that never answers."""

from __future__ import annotations

import base64
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpushare.cli.compose import api_server
from gpushare.kube.client import PODS, ApiError, KubeClient
from gpushare.webhook.server import WebhookServer, self_signed

CONFIGS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[KubeClient, str, bytes]]:
    server = api_server(tmp_path / "data", "127.0.0.1", 0)
    server.start()
    client = KubeClient.from_kubeconfig(str(server.write_kubeconfig(tmp_path / "admin.kc")))
    cert, key = self_signed(tmp_path / "pki", ["localhost"])
    hook = WebhookServer("127.0.0.1", 0, cert, key)
    hook.start()
    try:
        yield client, f"https://localhost:{hook.port}/mutate-pods", cert.read_bytes()
    finally:
        hook.stop()
        client.close()
        server.stop()


def _config(name: str, url: str, ca: bytes, **webhook: Any) -> dict[str, Any]:
    entry = {"name": "gpu.gpushare.io", "admissionReviewVersions": ["v1"],
             "sideEffects": "None",
             "clientConfig": {"url": url, "caBundle": base64.b64encode(ca).decode()},
             "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                        "resources": ["pods"]}], **webhook}
    return {"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration", "metadata": {"name": name},
            "webhooks": [entry]}


def _pod(name: str, fraction: str = "0.5") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default",
                         "annotations": {"gpu-fraction": fraction}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def test_matching_pod_is_mutated_by_the_webhook(setup) -> None:
    client, url, ca = setup
    client.create(CONFIGS, _config("gpu", url, ca))
    pod = client.create(PODS.collection("default"), _pod("frac"))
    container = pod["spec"]["containers"][0]
    assert container["envFrom"] == [{"configMapRef": {"name": "frac-gpu-share",
                                                      "optional": False}}]
    assert any(v["name"] == "gpushare-mps" for v in pod["spec"]["volumes"])
    stored = client.get(PODS.item("frac", "default")) or {}
    assert stored["spec"]["containers"][0]["envFrom"] == container["envFrom"]


def test_webhook_denial_refuses_the_create(setup) -> None:
    client, url, ca = setup
    client.create(CONFIGS, _config("gpu", url, ca))
    with pytest.raises(ApiError) as refused:
        client.create(PODS.collection("default"), _pod("bad", fraction="2"))
    assert refused.value.status == 400 and "gpu-fraction" in str(refused.value.body)
    assert client.get(PODS.item("bad", "default")) is None


def test_namespace_selector_and_rules_limit_what_is_sent(setup) -> None:
    client, url, ca = setup
    selector = {"matchLabels": {"gpushare.io/fractions": "on"}}
    client.create(CONFIGS, _config("gpu", url, ca, namespaceSelector=selector))
    pod = client.create(PODS.collection("default"), _pod("plain"))
    assert "envFrom" not in pod["spec"]["containers"][0]
    client.merge_patch("/api/v1/namespaces/default",
                       {"metadata": {"labels": {"gpushare.io/fractions": "on"}}})
    assert "envFrom" in client.create(PODS.collection("default"), _pod("now"))["spec"][
        "containers"][0]
    # rules: UPDATE is not in them, so an update is not sent (a label changes, nothing else)
    updated = client.merge_patch(PODS.item("plain", "default"),
                                 {"metadata": {"labels": {"x": "y"}}})
    assert "envFrom" not in updated["spec"]["containers"][0]


def test_failure_policy_fail_refuses_and_ignore_passes(setup, tmp_path: Path) -> None:
    client, url, _ = setup
    other, _ = self_signed(tmp_path / "other", ["localhost"])  # not the webhook's CA
    client.create(CONFIGS, _config("gpu", url, other.read_bytes()))
    with pytest.raises(ApiError) as refused:
        client.create(PODS.collection("default"), _pod("strict"))
    assert refused.value.status == 500 and "failed calling webhook" in str(refused.value.body)
    client.delete(f"{CONFIGS}/gpu")
    client.create(CONFIGS, _config("gpu", url, other.read_bytes(), failurePolicy="Ignore"))
    pod = client.create(PODS.collection("default"), _pod("lenient"))
    assert "envFrom" not in pod["spec"]["containers"][0]


def test_timeout_seconds_bounds_a_silent_webhook(setup) -> None:
    client, _, ca = setup
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()  # accepts connections (the kernel does) and never answers
    try:
        port = silent.getsockname()[1]
        client.create(CONFIGS, _config("slow", f"https://localhost:{port}/", ca,
                                       timeoutSeconds=1))
        with pytest.raises(ApiError) as refused:
            client.create(PODS.collection("default"), _pod("waits"))
        assert refused.value.status == 500
        assert "failed calling webhook" in str(refused.value.body)
        assert "timed out" in str(refused.value.body)
    finally:
        silent.close()


def test_invalid_configuration_is_refused_naming_the_field(setup) -> None:
    client, url, ca = setup
    with pytest.raises(ApiError) as refused:
        client.create(CONFIGS, _config("gpu", url, ca, failurePolicy="Sometimes"))
    assert refused.value.status == 422
    assert "webhooks[0].failurePolicy" in str(refused.value.body)
    with pytest.raises(ApiError) as plain_http:
        client.create(CONFIGS, _config("gpu", "http://localhost:1/", ca))
    assert "webhooks[0].clientConfig.url" in str(plain_http.value.body)


def test_a_create_waiting_on_its_webhook_does_not_stop_the_server(setup) -> None:
    client, _, ca = setup
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()  # accepts and never answers: the create waits its timeoutSeconds
    try:
        port = silent.getsockname()[1]
        client.create(CONFIGS, _config("slow", f"https://localhost:{port}/", ca,
                                       timeoutSeconds=10))
        outcome: list[object] = []
        create = threading.Thread(target=lambda: outcome.append(_try_create(client)))
        create.start()
        accepted, _ = silent.accept()  # the API server is now inside the webhook call
        try:
            # meanwhile the server answers other requests: a read and a write
            assert client.get("/api/v1/namespaces/default") is not None
            client.create("/api/v1/namespaces/default/configmaps",
                          {"metadata": {"name": "meanwhile"}, "data": {"a": "b"}})
            assert create.is_alive() and outcome == []
        finally:
            accepted.close()  # the webhook hangs up: the create fails (failurePolicy Fail)
        create.join(30)
        assert outcome and isinstance(outcome[0], ApiError) and outcome[0].status == 500
    finally:
        silent.close()


def _try_create(client: KubeClient) -> object:
    try:
        return client.create(PODS.collection("default"), _pod("waiting"))
    except ApiError as error:
        return error
