"""`gpushare webhook --configuration NAME` as a process against the real API server: it makes
its self-signed certificate, writes it into the configuration's caBundle, and from then on
the API server, checking the webhook against that bundle, gets fractional pods mutated."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from gpushare.cli.compose import api_server
from gpushare.kube.client import PODS, KubeClient
from waiting import wait_for

CONFIGS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_webhook_writes_its_ca_bundle_and_serves(tmp_path: Path) -> None:
    server = api_server(tmp_path / "data", "127.0.0.1", 0)
    server.start()
    kubeconfig = server.write_kubeconfig(tmp_path / "admin.kubeconfig")
    client = KubeClient.from_kubeconfig(str(kubeconfig))
    port = _free_port()
    client.create(CONFIGS, {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "gpushare-gpu-fractions"},
        "webhooks": [{"name": "gpu-fractions.gpushare.io", "admissionReviewVersions": ["v1"],
                      "sideEffects": "None", "failurePolicy": "Fail",
                      "clientConfig": {"url": f"https://localhost:{port}/mutate-pods"},
                      "rules": [{"operations": ["CREATE"], "apiGroups": [""],
                                 "apiVersions": ["v1"], "resources": ["pods"]}]}]})
    log = tmp_path / "webhook.log"
    webhook = subprocess.Popen(
        [sys.executable, "-m", "gpushare.cli.main", "webhook", "--host", "127.0.0.1",
         "--port", str(port), "--cert-dir", str(tmp_path / "pki"), "--configuration",
         "gpushare-gpu-fractions", "--kubeconfig", str(kubeconfig)],
        stdout=log.open("wb"), stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: "gpushare webhook on" in log.read_text() or webhook.poll() is not None,
                 60, "the webhook serving")
        assert webhook.poll() is None, log.read_text()
        config = client.get(f"{CONFIGS}/gpushare-gpu-fractions") or {}
        assert config["webhooks"][0]["clientConfig"]["caBundle"]
        pod = client.create(PODS.collection("default"), {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "frac", "annotations": {"gpu-fraction": "0.5"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
        assert pod["spec"]["containers"][0]["envFrom"] == [
            {"configMapRef": {"name": "frac-gpu-share", "optional": False}}]
    finally:
        webhook.terminate()
        webhook.wait(30)
        client.close()
        server.stop()
