"""The control plane's components have identities of their own: the API server keeps their
roles (controllers/rbac.yaml) in the root cluster, `gpushare kubeconfig --component`
issues their tokens, and the tenancy identity holds only inside tenant clusters."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from apiserver_harness import http_client

from gpushare.apiserver.auth.access import User
from gpushare.apiserver.auth.components import AUTOUPDATE, CONTROLLERS_USER, role_objects
from gpushare.cli.compose import api_server

RBAC = "/apis/rbac.authorization.k8s.io/v1"


def _kubeconfig(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpushare.cli.main", "kubeconfig",
                           "--data-dir", str(data), *args],
                          capture_output=True, text=True, timeout=60)


def _token(text: str) -> str:
    return str(yaml.safe_load(text)["users"][0]["user"]["token"])


def test_the_server_creates_the_component_roles_and_restores_them(tmp_path: Path) -> None:
    shipped = {(d["kind"], d["metadata"]["name"]): d for d in role_objects()}
    assert ("ClusterRole", "gpushare-controllers") in shipped
    with api_server(tmp_path) as server, http_client(server) as c:
        for (kind, name), doc in shipped.items():
            stored = c.get(f"{RBAC}/{kind.lower()}s/{name}").json()
            for key in ("rules", "roleRef", "subjects"):
                assert stored.get(key) == doc.get(key), (kind, name, key)
        binding = c.get(f"{RBAC}/clusterrolebindings/gpushare-controllers").json()
        assert {"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                "name": CONTROLLERS_USER} in binding["subjects"]
        # An edit is undone at the next start ...
        role = c.get(f"{RBAC}/clusterroles/gpushare-controllers").json()
        role["rules"] = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
        assert c.put(f"{RBAC}/clusterroles/gpushare-controllers", json=role).status_code == 200
        # ... unless the admin opted out of updates for that role.
        tenancy = c.get(f"{RBAC}/clusterroles/gpushare-tenancy").json()
        tenancy["metadata"]["annotations"][AUTOUPDATE] = "false"
        tenancy["rules"] = tenancy["rules"][:1]
        assert c.put(f"{RBAC}/clusterroles/gpushare-tenancy", json=tenancy).status_code == 200
    with api_server(tmp_path) as server, http_client(server) as c:
        restored = c.get(f"{RBAC}/clusterroles/gpushare-controllers").json()
        assert restored["rules"] == shipped[("ClusterRole", "gpushare-controllers")]["rules"]
        kept = c.get(f"{RBAC}/clusterroles/gpushare-tenancy").json()
        assert kept["rules"] == tenancy["rules"]


def test_component_kubeconfigs(tmp_path: Path) -> None:
    with api_server(tmp_path) as server:
        done = _kubeconfig(tmp_path, "--component", "controllers")
        assert done.returncode == 0, done.stderr
        token = _token(done.stdout)
        again = _kubeconfig(tmp_path, "--component", "controllers")
        assert _token(again.stdout) == token  # one token per component, kept
        with http_client(server, token) as c:
            review = c.post("/apis/authentication.k8s.io/v1/selfsubjectreviews", json={
                "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
            assert review.json()["status"]["userInfo"]["username"] == CONTROLLERS_USER
            assert c.get("/api/v1/pods").status_code == 200
            assert c.get("/api/v1/namespaces/default/serviceaccounts").status_code == 403
            # It cannot grant itself more than its roles.
            refused = c.post(f"{RBAC}/clusterrolebindings", json={
                "metadata": {"name": "more"}, "subjects": [
                    {"kind": "User", "name": CONTROLLERS_USER,
                     "apiGroup": "rbac.authorization.k8s.io"}],
                "roleRef": {"kind": "ClusterRole", "name": "cluster-admin",
                            "apiGroup": "rbac.authorization.k8s.io"}})
            assert refused.status_code == 403
        tenancy = _token(_kubeconfig(tmp_path, "--component", "tenancy").stdout)
        with http_client(server, tenancy) as c:
            assert c.get("/api/v1/namespaces").status_code == 401  # not in root
        bad = _kubeconfig(tmp_path, "--component", "scheduler")
        assert bad.returncode == 2 and "--component" in bad.stderr, bad.stderr


@pytest.mark.parametrize(("clusters", "valid", "invalid"), [
    (None, ("root", "t1"), ()),
    (("root",), ("root",), ("t1",)),
    (("!root",), ("t1", "t2"), ("root",)),
    (("t1", "!root"), ("t1",), ("root", "t2")),
])
def test_token_cluster_scopes(clusters: tuple[str, ...] | None, valid: tuple[str, ...],
                              invalid: tuple[str, ...]) -> None:
    user = User("u", (), clusters)
    assert all(user.valid_in(c) for c in valid)
    assert not any(user.valid_in(c) for c in invalid)
