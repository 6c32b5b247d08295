"""``gpushare controllers`` also runs the node-lifecycle controller: a node whose agent
stopped heartbeating turns Unknown, a static node stays Ready."""

from __future__ import annotations

from e2e_support import wait_for

from gpushare.controllers.nodes.static_nodes import (
    STATIC_NODE_ANNOTATION,
    register_static_node,
    static_node,
)
from gpushare.kube.client import NODES

LONG_AGO = "2020-01-01T00:00:00Z"


def _ready(client, name):
    node = client.get(NODES.item(name)) or {}
    return next(c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready")


def test_silent_agent_node_turns_unknown_and_static_node_stays_ready(client, controllers):
    silent = static_node("silent", "1xL4", "8", "32Gi", {}, LONG_AGO)
    del silent["metadata"]["annotations"][STATIC_NODE_ANNOTATION]
    register_static_node(client, silent)
    register_static_node(client, static_node("declared", "1xL4", "8", "32Gi", {}, LONG_AGO))
    wait_for(lambda: _ready(client, "silent") == "Unknown", timeout=30,
             what="the silent node Unknown")
    assert _ready(client, "declared") == "True"
