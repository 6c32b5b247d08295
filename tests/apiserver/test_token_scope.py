"""Tokens are valid only in the logical clusters they were issued for."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from apiserver_harness import Cluster, http_client


def _issue(cluster: Cluster, user: str, logical: str, path: Path) -> Path:
    done = subprocess.run(
        [sys.executable, "-m", "gpushare.cli.main", "kubeconfig", "--data-dir",
         str(cluster.server.data_dir), "--user", user, "--cluster", logical, "-o", str(path)],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return path


def test_a_cluster_scoped_token_is_refused_in_another_cluster(cluster: Cluster,
                                                              tmp_path: Path) -> None:
    for logical in ("scope-foo", "scope-bar"):
        with http_client(cluster.server, cluster=logical) as admin:
            admin.get("/api/v1/namespaces")  # the admin brings the cluster into being
            r = admin.post("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", json={
                "metadata": {"name": "bob-admin"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": "bob-all"},
                "subjects": [{"kind": "User", "name": "bob"}]})
            assert r.status_code == 201, r.text
            admin.post("/apis/rbac.authorization.k8s.io/v1/clusterroles", json={
                "metadata": {"name": "bob-all"},
                "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]})
    foo = _issue(cluster, "bob", "scope-foo", tmp_path / "foo.kubeconfig")
    assert cluster.kubectl("get", "namespaces", kubeconfig=foo).returncode == 0
    # The same token pointed at another logical cluster, or at the root one by name.
    for other in ("scope-bar", "root"):
        text = foo.read_text().replace("/clusters/scope-foo", f"/clusters/{other}")
        moved = tmp_path / f"{other}.kubeconfig"
        moved.write_text(text)
        refused = cluster.kubectl("get", "namespaces", kubeconfig=moved, check=False)
        assert refused.returncode != 0 and "must be logged in" in refused.stderr, other


def test_a_tenant_token_without_a_prefix_is_served_in_its_own_cluster(
        cluster: Cluster, tmp_path: Path) -> None:
    """kubectl drops the server URL's path for `get --raw`: the tenant's token then reaches
    the root paths, and is served in its own cluster, never in the root one."""
    with http_client(cluster.server, cluster="scope-home") as admin:
        admin.get("/api/v1/namespaces")
        for name in ("default", "only-in-home"):
            admin.post("/api/v1/namespaces", json={"metadata": {"name": name}})
        admin.post("/api/v1/namespaces/default/configmaps",
                   json={"metadata": {"name": "home-cm"}})
    with http_client(cluster.server) as root:
        root.post("/api/v1/namespaces", json={"metadata": {"name": "only-in-root"}})
        root.post("/api/v1/namespaces/default/configmaps",
                  json={"metadata": {"name": "root-cm"}})
    cluster.server.tokens.add("home-token-for-dave", "dave", ["system:masters"],
                              ["scope-home"])
    home = tmp_path / "home.kubeconfig"
    cluster.server.write_kubeconfig(home, token="home-token-for-dave", cluster="scope-home")
    assert "/clusters/scope-home" in home.read_text()
    raw = cluster.kubectl("get", "--raw", "/api/v1/namespaces", kubeconfig=home)
    names = {n["metadata"]["name"] for n in json.loads(raw.stdout)["items"]}
    assert "only-in-home" in names and "only-in-root" not in names
    raw = cluster.kubectl("get", "--raw", "/api/v1/namespaces/default/configmaps",
                          kubeconfig=home)
    cms = {c["metadata"]["name"] for c in json.loads(raw.stdout)["items"]}
    assert "home-cm" in cms and "root-cm" not in cms
    # Without the prefix in the kubeconfig at all: the same, every verb.
    bare = tmp_path / "bare.kubeconfig"
    bare.write_text(home.read_text().replace("/clusters/scope-home", ""))
    cluster.kubectl("create", "configmap", "made-bare", kubeconfig=bare)
    with http_client(cluster.server) as root:
        assert root.get("/api/v1/namespaces/default/configmaps/made-bare").status_code == 404
    with http_client(cluster.server, cluster="scope-home") as admin:
        assert admin.get("/api/v1/namespaces/default/configmaps/made-bare").status_code == 200
    # A token valid in several clusters (or all but some) has no home: refused as before.
    cluster.server.tokens.add("two-homes-token", "erin", [], ["scope-home", "scope-foo"])
    with http_client(cluster.server, "two-homes-token") as erin:
        assert erin.get("/api/v1/namespaces").status_code == 401


def test_a_token_without_clusters_is_the_root_clusters_unless_admin(cluster: Cluster) -> None:
    cluster.server.tokens.add("plain-token-for-carol", "carol", [])
    with http_client(cluster.server, "plain-token-for-carol") as carol:
        assert carol.get("/api/v1/namespaces").status_code == 403  # known, no grants
    with http_client(cluster.server, "plain-token-for-carol", cluster="scope-foo") as carol:
        assert carol.get("/api/v1/namespaces").status_code == 401
    with http_client(cluster.server, cluster="scope-foo") as admin:
        assert admin.get("/api/v1/namespaces").status_code == 200
