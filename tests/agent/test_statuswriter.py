"""The agent's status writer against a real API server: a write its identity is refused
(403) is given up at once, not retried in front of the other pods' writes; a status
retried after a newer one of the same pod was written is dropped as stale."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpushare.agent.pods.statuswriter import StatusWriter
from gpushare.apiserver.http.server import ApiServer
from gpushare.cli.compose import api_server
from gpushare.kube.client import PODS, KubeClient, Resource
from waiting import wait_for

ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
    "metadata": {"name": "status-only"},
    "rules": [{"apiGroups": [""], "resources": ["pods", "pods/status"],
               "verbs": ["get", "list", "watch"]},
              {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]}]}
BINDING = {
    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
    "metadata": {"name": "status-only"},
    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                "name": "status-only"},
    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                  "name": "status-writer"}]}


def _pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "x", "command": ["true"]}]}}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ApiServer]:
    running = api_server(tmp_path / "api").start()
    yield running
    running.stop()


def test_a_refused_write_is_given_up_at_once_and_holds_up_nobody(
        server: ApiServer, tmp_path: Path) -> None:
    admin = KubeClient.from_kubeconfig(str(server.data_dir / "admin.kubeconfig"))
    token = secrets.token_urlsafe(24)
    server.tokens.add(token, "status-writer", [], ["root"])
    kubeconfig = server.write_kubeconfig(tmp_path / "writer.kubeconfig", token=token,
                                         user="status-writer")
    writer_kube = KubeClient.from_kubeconfig(str(kubeconfig))
    stop = threading.Event()
    writer = StatusWriter(writer_kube, "n", stop)
    thread = threading.Thread(target=writer.run, daemon=True)
    try:
        admin.create(Resource("rbac.authorization.k8s.io/v1", "clusterroles", False)
                     .collection(), ROLE)
        admin.create(Resource("rbac.authorization.k8s.io/v1", "clusterrolebindings", False)
                     .collection(), BINDING)
        first, second = (admin.create(PODS.collection("default"), _pod(n)) for n in ("a", "b"))
        # a's annotation patch is refused (no `patch pods`); b's status is allowed
        writer.writes.put(("annotations", "default", "a", first["metadata"]["uid"],
                           {"example.com/x": "y"}))
        writer.writes.put(("status", "default", "b", second["metadata"]["uid"],
                           {"phase": "Running"}))
        thread.start()
        wait_for(lambda: (admin.get(PODS.item("b", "default")) or {}).get(
            "status", {}).get("phase") == "Running", 30, "b's status written")
        # a's write was taken first and given up, not put back to be retried
        assert [(w[0], w[2]) for w, _ in writer.given_up] == [("annotations", "a")]
        assert "403" in writer.given_up[0][1] or "forbidden" in writer.given_up[0][1].lower()
    finally:
        stop.set()
        if thread.is_alive():
            thread.join(10)
        writer_kube.close()
        admin.close()


def test_a_stale_status_retried_after_a_newer_one_is_dropped(server: ApiServer) -> None:
    admin = KubeClient.from_kubeconfig(str(server.data_dir / "admin.kubeconfig"))
    stop = threading.Event()
    writer = StatusWriter(admin, "n", stop)
    try:
        pod = admin.create(PODS.collection("default"), _pod("c"))
        uid = pod["metadata"]["uid"]
        old = ("status", "default", "c", uid, {"phase": "Pending"})
        # the older status failed once and waits for its retry (due now) ...
        writer._later.append((time.monotonic(), 1, 1, time.monotonic() - 5, old))
        # ... while a newer one of the same pod was written
        writer._status_sent[("default", "c")] = time.monotonic()
        admin.merge_patch(PODS.item("c", "default", "status"), {"status": {"phase": "Running"}})
        stop.set()
        writer.run()  # drains what is due and returns
        assert admin.get(PODS.item("c", "default"))["status"]["phase"] == "Running"
    finally:
        admin.close()
