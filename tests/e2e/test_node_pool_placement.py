"""Placement rules per node pool, live: the scheduler's config gives the pool "serve"
spread while the cluster packs; pods labelled with a pool land on its nodes by its rule."""

from __future__ import annotations

import pytest
from e2e_support import add_node, fraction_pod, team_queue, wait_for

from gpushare.controllers.scheduling.scheduler_config import scheduler_config

QUEUE = team_queue("-1", unlimited_cpu_memory=True)


def pod(name: str, pool: str) -> str:
    return fraction_pod(name, "0.25", labels=f", kai.scheduler/node-pool: {pool}")


@pytest.fixture
def pool_controllers(server):
    from gpushare.controller_manager import start_controllers

    config = scheduler_config({"config": {
        "placement": {"gpu": "binpack"},
        "nodePools": {"serve": {"placement": {"gpu": "spread"}}}}})
    running = start_controllers(str(server.kubeconfig), scheduler_config=config)
    yield running
    running.stop()


def test_each_node_pool_places_by_its_own_rule(server, pool_controllers, kubectl):
    for pool in ("train", "serve"):
        for i in range(2):
            add_node(server.kubeconfig, f"{pool}{i}", "2xL40S", "--label",
                     f"kai.scheduler/node-pool={pool}")
    kubectl.run("apply", "-f", "-", stdin=QUEUE)
    for pool in ("train", "serve"):
        for i in range(2):
            kubectl.run("apply", "-f", "-", stdin=pod(f"{pool}-pod{i}", pool=pool))

    def placed():
        out = {}
        for pod in kubectl.json("get", "pods", "-n", "default")["items"]:
            node = pod["spec"].get("nodeName")
            if not node:
                return None
            out[pod["metadata"]["name"]] = node
        return out if len(out) == 4 else None

    nodes = wait_for(placed, what="the four pods bound")
    # The cluster's binpack: both train pods on one node; the pool's spread: one per node.
    assert nodes["train-pod0"] == nodes["train-pod1"]
    assert nodes["train-pod0"].startswith("train")
    assert sorted((nodes["serve-pod0"], nodes["serve-pod1"])) == ["serve0", "serve1"]
