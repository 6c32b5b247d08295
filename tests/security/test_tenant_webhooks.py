"""Attack (a server-side request): a tenant registers a MutatingWebhookConfiguration in its
own cluster, naming an address only the API server's host can reach; each create would
then have the API server call it. Webhooks are served only in the home cluster: the
tenant's configuration is refused, and nothing is called."""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx

from gpushare.cli.compose import api_server

VCS = "/apis/tenancy.gpushare.io/v1alpha1/virtualclusters"
CONFIGS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


def test_a_tenant_cannot_register_a_webhook(tmp_path: Path) -> None:
    server = api_server(tmp_path / "data", "127.0.0.1", 0)
    server.start()
    try:
        def client(cluster: str) -> httpx.Client:
            return httpx.Client(base_url=server.cluster_url(cluster), timeout=30,
                                headers={"Authorization": f"Bearer {server.admin_token}"},
                                verify=ssl.create_default_context(cafile=str(server.ca_path)))

        with client("root") as root:
            made = root.post(VCS, json={"apiVersion": "tenancy.gpushare.io/v1alpha1",
                                        "kind": "VirtualCluster", "metadata": {"name": "red"},
                                        "spec": {"queues": ["default"]}})
            assert made.status_code == 201, made.text
        hook = {"apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingWebhookConfiguration", "metadata": {"name": "steal"},
                "webhooks": [{"name": "steal.example.com", "admissionReviewVersions": ["v1"],
                              "sideEffects": "None", "failurePolicy": "Ignore",
                              "clientConfig": {"url": "https://127.0.0.1:10250/"},
                              "rules": [{"operations": ["*"], "apiGroups": ["*"],
                                         "apiVersions": ["*"], "resources": ["*"]}]}]}
        with client("red") as red:
            refused = red.post(CONFIGS, json=hook)
            assert refused.status_code == 403, refused.text
            assert "home cluster" in refused.json()["message"]
            assert red.get(f"{CONFIGS}/steal").status_code == 404
    finally:
        server.stop()
