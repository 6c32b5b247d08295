"""Tenants of one API server for the fairness and quota tests: a VirtualCluster in the root
cluster (its quota set there by the platform), its logical cluster, and a token valid in
it only, bound to a role allowing everything inside it."""

from __future__ import annotations

import secrets
from typing import Any

import httpx
from apiserver_harness import http_client

from gpushare.apiserver.http.server import ApiServer

VCS = "/apis/tenancy.gpushare.io/v1alpha1/virtualclusters"
RBAC = "/apis/rbac.authorization.k8s.io/v1"


def make_tenant(server: ApiServer, name: str, **spec: Any) -> str:
    """Create tenant `name` with `spec` fields besides its queue; its user's token."""
    with http_client(server) as admin:
        r = admin.post(VCS, json={"apiVersion": "tenancy.gpushare.io/v1alpha1",
                                  "kind": "VirtualCluster", "metadata": {"name": name},
                                  "spec": {"queues": ["default"], **spec}})
        assert r.status_code == 201, r.text
    with http_client(server, cluster=name) as admin:
        assert admin.get("/api/v1/namespaces/default").status_code == 200
        admin.post(f"{RBAC}/clusterroles", json={
            "metadata": {"name": "everything"},
            "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]})
        r = admin.post(f"{RBAC}/clusterrolebindings", json={
            "metadata": {"name": f"{name}-admin"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "everything"},
            "subjects": [{"kind": "User", "name": f"{name}-user"}]})
        assert r.status_code == 201, r.text
    token = secrets.token_urlsafe(24)
    server.tokens.add(token, f"{name}-user", [], [name])
    return token


def tenant_client(server: ApiServer, name: str, token: str) -> httpx.Client:
    return http_client(server, token, cluster=name)


def configmap(name: str, size: int = 10) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "data": {"blob": "x" * size}}
