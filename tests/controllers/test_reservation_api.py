"""Reservation through the real API: a gang that waits past its queue's
``reservationAfter`` gets its node reserved (annotation, ``Reserved`` condition, Event),
a small job is kept off that node, a restarted scheduler holds the same node, and the
reservation is released once the gang is placed. Real API server, real controllers; no
agent (pods are bound, not run)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from api_cluster import bound_node, events, gpu_pod, node_cluster
from gpushare.controller_manager import start_controllers
from gpushare.kube.client import PODGROUPS, PODS, KubeClient
from waiting import wait_for

QUEUE = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "team"},
         "spec": {"reservationAfter": "0s",
                  "resources": {"gpu": {"quota": 4, "limit": -1, "overQuotaWeight": 1}}}}
ENABLED = ("pod-grouper", "scheduler")
GANG = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
        "metadata": {"name": "gang", "namespace": "default"},
        "spec": {"minMember": 2, "queue": "team", "priorityClassName": "train"}}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[KubeClient, str]]:
    with node_cluster(tmp_path, "2xH100", QUEUE) as made:
        yield made


def _pod(name: str, group: str | None = None) -> dict[str, Any]:
    return gpu_pod(name, "1", group=group)


def _gang(client: KubeClient) -> dict[str, Any]:
    return client.get(PODGROUPS.item("gang", "default")) or {}


def _reservation(client: KubeClient) -> dict[str, Any] | None:
    text = (_gang(client)["metadata"].get("annotations") or {}).get("gpushare.io/reservation")
    return json.loads(text) if text else None


def test_a_waiting_gang_reserves_its_node_through_restarts_until_placed(
        cluster: tuple[KubeClient, str]) -> None:
    client, kubeconfig = cluster
    first = start_controllers(kubeconfig, enabled=ENABLED, metrics_push_interval=None)
    try:
        client.create(PODS.collection("default"), _pod("holder"))
        wait_for(lambda: bound_node(client, "holder") == "box", what="the holder bound")
        client.create(PODGROUPS.collection("default"), GANG)
        for i in range(2):
            client.create(PODS.collection("default"), _pod(f"gang-{i}", "gang"))
        wait_for(lambda: _reservation(client), what="the gang's reservation written")
        assert _reservation(client)["nodes"] == ["box"]
        conditions = (_gang(client).get("status") or {}).get("conditions") or []
        assert [(c["type"], c["nodes"]) for c in conditions] == [("Reserved", ["box"])]
        assert events(client, "gang", "Reserved")
        client.create(PODS.collection("default"), _pod("small"))
        wait_for(lambda: events(client, "small", "Unschedulable"), what="small told why")
        assert "reserved for a waiting gang" in events(client, "small", "Unschedulable")[0][
            "message"]
        assert bound_node(client, "small") is None
    finally:
        first.stop()
    # Made stricter while the scheduler is down: a scheduler that lost the reservation
    # would not make it again for an hour, and would bind the small pods at once.
    client.merge_patch("/apis/scheduling.run.ai/v2/queues/team",
                       {"spec": {"reservationAfter": "1h"}})

    again = start_controllers(kubeconfig, enabled=ENABLED, metrics_push_interval=None)
    try:
        client.create(PODS.collection("default"), _pod("small2"))
        wait_for(lambda: events(client, "small2", "Unschedulable"), what="small2 told why")
        # the restarted scheduler read the reservation back: the free GPU stays free
        assert bound_node(client, "small") is None and bound_node(client, "small2") is None
        assert _reservation(client)["nodes"] == ["box"]
        client.delete(PODS.item("small", "default"), grace_period_seconds=0)
        client.delete(PODS.item("small2", "default"), grace_period_seconds=0)
        client.delete(PODS.item("holder", "default"), grace_period_seconds=0)
        wait_for(lambda: bound_node(client, "gang-0") == bound_node(client, "gang-1") == "box",
                 what="the gang bound")
        wait_for(lambda: _reservation(client) is None, what="the reservation released")
        wait_for(lambda: not (_gang(client).get("status") or {}).get("conditions"),
                 what="the Reserved condition cleared")
        assert events(client, "gang", "ReservationReleased")
    finally:
        again.stop()
