"""A scheduler started again (a controllers restart) while pods stop on their node after
their PodGroup is gone: it must not hand out what they still hold. Real API server, real
controllers; no agent, so the stopping pod stays Terminating until the test finishes it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from api_cluster import bound_node, events, gpu_pod, node_cluster
from gpushare.controller_manager import start_controllers
from gpushare.kube.client import PODGROUPS, PODS, KubeClient
from waiting import wait_for

QUEUE = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "team"},
         "spec": {"resources": {"gpu": {"quota": 1, "limit": -1, "overQuotaWeight": 1}}}}
ENABLED = ("pod-grouper", "scheduler")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[KubeClient, str]]:
    with node_cluster(tmp_path, "1xH100", QUEUE) as made:
        yield made


def _pod(name: str, gpu: str) -> dict[str, Any]:
    return gpu_pod(name, gpu, grace_s=30)


def _pipelined(client: KubeClient, name: str) -> list[dict[str, Any]]:
    return events(client, name, "Pipelined")


def test_a_restarted_scheduler_waits_for_pods_stopping_without_their_podgroup(
        cluster: tuple[KubeClient, str]) -> None:
    client, kubeconfig = cluster
    first = start_controllers(kubeconfig, enabled=ENABLED, metrics_push_interval=None)
    try:
        client.create(PODS.collection("default"), _pod("old", "1"))
        wait_for(lambda: bound_node(client, "old") == "box", what="the whole-GPU pod bound")
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
        wait_for(lambda: _pipelined(client, "new") or bound_node(client, "new"),
                 what="the new pod pipelined (or bound)")
        # it waits for the GPU the stopping pod still holds: not bound beside it, where
        # the agent would refuse it as over-committing the GPU
        assert bound_node(client, "new") is None
        assert _pipelined(client, "new")
        client.delete(PODS.item("old", "default"), grace_period_seconds=0)  # it has stopped
        wait_for(lambda: bound_node(client, "new") == "box", what="the new pod bound")
        new = client.get(PODS.item("new", "default")) or {}
        assert new["metadata"]["annotations"]["gpushare.io/gpu-indices"] == "0"
    finally:
        again.stop()
