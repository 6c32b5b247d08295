"""A scheduler started again (a controllers restart) while pods stop on their node after
their PodGroup is gone: it must not hand out what they still hold. Real API server, real
controllers; no agent, so the stopping pod stays Terminating until the test finishes it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpushare.cli.compose import api_server
from gpushare.controller_manager import start_controllers
from gpushare.kube.client import EVENTS, PODGROUPS, PODS, KubeClient
from waiting import wait_for

QUEUE = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "team"},
         "spec": {"resources": {"gpu": {"quota": 1, "limit": -1, "overQuotaWeight": 1}}}}
ENABLED = ("pod-grouper", "scheduler")


def _pod(name: str, gpu: str) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "busybox"}
    annotations = {}
    if gpu == "1":
        container["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    else:
        annotations["gpu-fraction"] = gpu
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "annotations": annotations,
                         "labels": {"kai.scheduler/queue": "team"}},
            "spec": {"schedulerName": "gpushare", "terminationGracePeriodSeconds": 30,
                     "containers": [container]}}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[KubeClient, str]]:
    server = api_server(tmp_path / "data", "127.0.0.1", 0)
    server.start()
    kubeconfig = str(server.write_kubeconfig(tmp_path / "admin.kubeconfig"))
    client = KubeClient.from_kubeconfig(kubeconfig)
    try:
        added = subprocess.run([sys.executable, "-m", "gpushare.cli.main", "node", "add", "box",
                                "--gpus", "1xH100", "--no-taint", "--kubeconfig", kubeconfig],
                               capture_output=True, text=True, timeout=60)
        assert added.returncode == 0, added.stderr
        client.create("/apis/scheduling.run.ai/v2/queues", QUEUE)
        yield client, kubeconfig
    finally:
        client.close()
        server.stop()


def _bound_node(client: KubeClient, name: str) -> str | None:
    return ((client.get(PODS.item(name, "default")) or {}).get("spec") or {}).get("nodeName")


def _pipelined(client: KubeClient, name: str) -> list[dict[str, Any]]:
    return [e for e in client.list(EVENTS.collection("default"))["items"]
            if e["involvedObject"]["name"] == name and e.get("reason") == "Pipelined"]


def test_a_restarted_scheduler_waits_for_pods_stopping_without_their_podgroup(
        cluster: tuple[KubeClient, str]) -> None:
    client, kubeconfig = cluster
    first = start_controllers(kubeconfig, enabled=ENABLED, metrics_push_interval=None)
    try:
        client.create(PODS.collection("default"), _pod("old", "1"))
        wait_for(lambda: _bound_node(client, "old") == "box", what="the whole-GPU pod bound")
    finally:
        first.stop()
    old = client.get(PODS.item("old", "default")) or {}
    group = old["metadata"]["annotations"]["pod-group-name"]
    # Deleted (it stops: its agent would end its processes within 30 s), and its PodGroup
    # goes at once, as a Job's does when the Job is deleted with its pods.
    client.delete(PODS.item("old", "default"))
    client.delete(PODGROUPS.item(group, "default"))
    assert (client.get(PODS.item("old", "default")) or {})["metadata"].get("deletionTimestamp")

    again = start_controllers(kubeconfig, enabled=ENABLED, metrics_push_interval=None)
    try:
        client.create(PODS.collection("default"), _pod("new", "0.5"))
        wait_for(lambda: _pipelined(client, "new") or _bound_node(client, "new"),
                 what="the new pod pipelined (or bound)")
        # it waits for the GPU the stopping pod still holds: not bound beside it, where
        # the agent would refuse it as over-committing the GPU
        assert _bound_node(client, "new") is None
        assert _pipelined(client, "new")
        client.delete(PODS.item("old", "default"), grace_period_seconds=0)  # it has stopped
        wait_for(lambda: _bound_node(client, "new") == "box", what="the new pod bound")
        new = client.get(PODS.item("new", "default")) or {}
        assert new["metadata"]["annotations"]["gpushare.io/gpu-indices"] == "0"
    finally:
        again.stop()
