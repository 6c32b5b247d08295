"""The syncer in unlucky orderings of the two clusters' events: the tenant pod still goes
when its host pod goes.

A real API server and the real tenancy controller; the orderings are forced by holding
back one answer or one watch event of the host, which is what a loaded machine does."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tenancy_support import wait_for

from gpushare.cli.compose import api_server
from gpushare.controller_manager import ControllerSet, start_controllers
from gpushare.kube.client import PODS, KubeClient
from gpushare.tenancy import names
from gpushare.tenancy.controller import VIRTUALCLUSTERS, tenant_client
from gpushare.tenancy.syncer import RESYNC_SECONDS, TenantSyncer

HOST_NS = "vc-nlp"


def _pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"schedulerName": "gpushare",
                     "containers": [{"name": "c", "image": "python",
                                     "command": ["python3", "-c", "pass"]}]}}


class Running:
    def __init__(self, root: Path) -> None:
        self.server = api_server(root / "data").start()
        self.kubeconfig = str(root / "data" / "admin.kubeconfig")
        self.host = KubeClient.from_kubeconfig(self.kubeconfig)
        self.controllers: ControllerSet = start_controllers(self.kubeconfig,
                                                            enabled=("tenancy",))
        self.host.create(VIRTUALCLUSTERS.collection(), {
            "apiVersion": "tenancy.gpushare.io/v1alpha1", "kind": "VirtualCluster",
            "metadata": {"name": "nlp"}, "spec": {"queues": ["nlp"]}})
        self.syncer: TenantSyncer = wait_for(
            lambda: (s := self.controllers.controllers["tenancy"].syncers.get("nlp"))
            and s.ready.is_set() and s, 30, "the syncer of nlp")
        self.tenant = tenant_client(self.kubeconfig, "nlp")

    def host_pod_of(self, name: str) -> dict[str, Any] | None:
        for pod in self.host.list(PODS.collection(HOST_NS)).get("items") or ():
            if pod["metadata"]["annotations"].get(names.TENANT_OBJECT_ANNOTATION) == (
                    f"default/{name}"):
                return pod
        return None

    def tenant_pod(self, name: str) -> dict[str, Any] | None:
        return self.tenant.get(PODS.item(name, "default"))

    def stop(self) -> None:
        self.controllers.stop()
        self.server.stop()


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Running]:
    started = Running(tmp_path)
    yield started
    started.stop()


def test_host_pod_deleted_before_the_syncer_reads_its_create_answer(running: Running):
    """The create's answer arrives after the host watch told of the pod and of its
    deletion (an admin removed it at once): the answer must not stand in for a pod still
    on its way, or the tenant pod would stay, synced to nothing, for ever."""
    syncer = running.syncer
    deleted = threading.Event()
    created_names: list[str] = []

    def watch_deleted(kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if kind == "DELETED" and obj["metadata"]["name"] in created_names:
            deleted.set()

    syncer.h.pods.add_handler(watch_deleted)
    real_create = syncer.host.create  # the controllers' own client

    def create(path: str, body: dict[str, Any]) -> dict[str, Any]:
        answer = real_create(path, body)
        if path == PODS.collection(HOST_NS) and not created_names:
            created_names.append(answer["metadata"]["name"])
            running.host.delete(PODS.item(answer["metadata"]["name"], HOST_NS))
            assert deleted.wait(10), "the host watch never told of the deletion"
        return answer

    syncer.host.create = create  # type: ignore[method-assign]
    running.tenant.create(PODS.collection("default"), _pod("quick"))
    wait_for(lambda: created_names, 30, "the host pod created")
    # deleted on the host: the tenant pod goes too (and is not made again on the host),
    # on the strength of the watch events, long before any later pass could stumble on it
    wait_for(lambda: running.tenant_pod("quick") is None, 2 * RESYNC_SECONDS,
             "the tenant pod gone")
    assert running.host_pod_of("quick") is None


def test_a_missed_host_deletion_is_caught_by_the_resync(running: Running):
    """The host pod's DELETED event never reaches the syncer: its periodic resync still
    carries the deletion to the tenant."""
    syncer = running.syncer
    running.tenant.create(PODS.collection("default"), _pod("missed"))
    wait_for(lambda: (running.tenant_pod("missed") or {}).get("metadata", {})
             .get("annotations", {}).get(names.HOST_UID_ANNOTATION), 30, "synced")
    host_pod = running.host_pod_of("missed")
    assert host_pod is not None
    syncer.ready.clear()  # the controller hands it no host events for now
    try:
        running.host.delete(PODS.item(host_pod["metadata"]["name"], HOST_NS))
        wait_for(lambda: syncer.h.pods.get(f"{HOST_NS}/{host_pod['metadata']['name']}")
                 is None, 10, "the host cache without the pod")
    finally:
        syncer.ready.set()
    assert running.tenant_pod("missed") is not None  # nothing told the syncer yet
    wait_for(lambda: running.tenant_pod("missed") is None, 2 * RESYNC_SECONDS,
             "the tenant pod gone after a resync")
