"""Heartbeats for agentless nodes (``gpushare node add``).

Nothing runs on such a node, so nothing would renew its Lease in ``kube-node-lease`` or
its ``Ready`` condition, and on a real cluster kube-controller-manager's node lifecycle
controller would mark it ``NotReady``/unreachable after its grace period (40 s by
default). The controllers renew both for it, every ``RENEW_SECONDS``: the node stands for
declared capacity for as long as it exists.
"""

from __future__ import annotations

import logging

from gpushare.api.objects import Meta, Obj
from gpushare.api.timefmt import parse_rfc3339, rfc3339, rfc3339_micro
from gpushare.kube.client import NODES, ApiError, KubeClient
from gpushare.kube.lease import renew_node_lease

log = logging.getLogger(__name__)

HOLDER = "gpushare-controllers"
LEASE_SECONDS = 40
RENEW_SECONDS = 10.0



def _ready(node: Obj) -> Obj | None:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition
    return None


def due(node: Obj, now: float, every: float = RENEW_SECONDS) -> bool:
    """Whether the node's Ready heartbeat is older than ``every`` (or not True)."""
    ready = _ready(node)
    if ready is None or ready.get("status") != "True":
        return True
    try:
        beat = parse_rfc3339(str(ready.get("lastHeartbeatTime") or ""))
    except ValueError:
        return True
    return now - beat >= every


def ready_patch(node: Obj, now: float) -> Obj:
    """The status patch that renews ``Ready=True`` (its transition time kept when it was
    already True); the other conditions stay."""
    ready = _ready(node) or {}
    stamp = rfc3339(now)
    condition = {
        "type": "Ready", "status": "True", "reason": "StaticNode",
        "message": "declared with gpushare node add; renewed by gpushare controllers",
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": ready.get("lastTransitionTime")
        if ready.get("status") == "True" else stamp,
    }
    others = [c for c in (node.get("status") or {}).get("conditions") or []
              if c.get("type") != "Ready"]
    return {"status": {"conditions": [*others, condition]}}


def renew(client: KubeClient, node: Obj, now: float) -> bool:
    """Renew the node's Lease and Ready condition when due; True when written."""
    if not due(node, now):
        return False
    name = Meta.of(node).name
    renew_node_lease(client, name, HOLDER, LEASE_SECONDS, rfc3339_micro(now))
    try:
        client.merge_patch(NODES.item(name, sub="status"), ready_patch(node, now))
    except ApiError as error:
        if not error.not_found:
            log.warning("renewing agentless node %s failed: %s", name, error)
        return False
    return True
