"""The node-lifecycle controller: a node whose agent stopped heartbeating turns Unknown.

An agent renews its Node's `Ready` condition (`lastHeartbeatTime`) and its Lease in
`kube-node-lease` every few seconds. When neither moved for `grace_s` (by this controller's
own clock, from when it saw them change: `heartbeats.py`; the agent's clock may be skewed),
this controller sets
`Ready` to `Unknown` (reason `NodeStatusUnknown`) and adds the `node.kubernetes.io/unreachable`
NoSchedule taint, so nothing new lands there; the taint goes again once the node is Ready.
Nodes annotated `gpushare.io/static-node: "true"` have no agent: this controller renews
their Lease and Ready condition instead (`controllers/nodes/agentless_nodes.py`).

Entry point: `run(client, stop_event, grace_s=40, interval_s=5)`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from kubernetes import client

from gpushare.api.contracts import STATIC_NODE_ANNOTATION
from gpushare.api.objects import Meta
from gpushare.api.timefmt import parse_rfc3339, rfc3339
from gpushare.controllers.nodes import agentless_nodes
from gpushare.controllers.nodes.heartbeats import HeartbeatObserver
from gpushare.kube.client import NODES, KubeClient
from gpushare.kube.lease import node_lease

log = logging.getLogger("gpushare.controllers.nodes.node_lifecycle")

STATIC_NODE = STATIC_NODE_ANNOTATION
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
DEFAULT_GRACE_S = 40.0


@dataclass(frozen=True, slots=True)
class NodeDecision:
    node: str
    status_patch: dict[str, Any] | None  # for the status subresource
    spec_patch: dict[str, Any] | None  # taints


def _ready(node: dict[str, Any]) -> dict[str, Any] | None:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition
    return None


def _time(text: object) -> float | None:
    if not text:
        return None
    try:
        return parse_rfc3339(str(text))
    except ValueError:
        return None


def last_heartbeat(node: dict[str, Any], lease: dict[str, Any] | None) -> float | None:
    stamps = []
    ready = _ready(node)
    if ready is not None:
        stamps.append(_time(ready.get("lastHeartbeatTime")))
    if lease is not None:
        stamps.append(_time((lease.get("spec") or {}).get("renewTime")))
    found = [s for s in stamps if s is not None]
    return max(found) if found else None


def decide(
    node: dict[str, Any], lease: dict[str, Any] | None, now: float, grace_s: float,
    age: float,
) -> NodeDecision | None:
    """What to change on one node, or None. Pure.

    `age`: seconds since the controller saw the node's heartbeat change, on its own clock
    (`heartbeats.HeartbeatObserver`); the agent's timestamps are never compared with `now`,
    which only stamps what this writes."""
    meta = Meta.of(node)
    if meta.annotations.get(STATIC_NODE) == "true":
        return None
    name = meta.name
    ready = _ready(node)
    taints = list((node.get("spec") or {}).get("taints") or [])
    tainted = any(t.get("key") == UNREACHABLE_TAINT for t in taints)
    heartbeat = last_heartbeat(node, lease)
    if age > grace_s:
        status_patch = None
        if ready is None or ready.get("status") != "Unknown":
            condition = {
                "type": "Ready",
                "status": "Unknown",
                "reason": "NodeStatusUnknown",
                "message": "The node agent stopped posting node status.",
                "lastHeartbeatTime": (ready or {}).get("lastHeartbeatTime")
                or (rfc3339(heartbeat) if heartbeat is not None else None),
                "lastTransitionTime": rfc3339(now),
            }
            others = [
                c for c in (node.get("status") or {}).get("conditions") or []
                if c.get("type") != "Ready"
            ]
            status_patch = {"status": {"conditions": [*others, condition]}}
        spec_patch = None
        if not tainted:
            taint = {"key": UNREACHABLE_TAINT, "effect": "NoSchedule", "timeAdded": rfc3339(now)}
            spec_patch = {"spec": {"taints": [*taints, taint]}}
        if status_patch is None and spec_patch is None:
            return None
        return NodeDecision(name, status_patch, spec_patch)
    if tainted and ready is not None and ready.get("status") == "True":
        kept = [t for t in taints if t.get("key") != UNREACHABLE_TAINT]
        return NodeDecision(name, None, {"spec": {"taints": kept or None}})
    return None


class NodeLifecycleController:
    def __init__(self, kube: KubeClient, grace_s: float = DEFAULT_GRACE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        self.grace_s = grace_s
        self.heartbeats = HeartbeatObserver(clock)

    def reconcile_once(self, now: float | None = None) -> list[NodeDecision]:
        now = time.time() if now is None else now
        applied = []
        nodes = self.kube.list(NODES.collection()).get("items") or []
        self.heartbeats.keep_only(Meta.of(n).name for n in nodes)
        for node in nodes:
            meta = Meta.of(node)
            name = meta.name
            lease = None
            if meta.annotations.get(STATIC_NODE) != "true":
                lease = node_lease(self.kube, name)
            else:
                agentless_nodes.renew(self.kube, node, now)  # no agent to heartbeat for it
            age = self.heartbeats.age(name, node, lease)
            decision = decide(node, lease, now, self.grace_s, age)
            if decision is None:
                continue
            # The taint before the condition: whoever sees Ready=Unknown (the scheduler, a
            # watcher) already sees the node closed to new pods.
            if decision.spec_patch is not None:
                self.kube.merge_patch(NODES.item(name), decision.spec_patch)
            if decision.status_patch is not None:
                self.kube.merge_patch(NODES.item(name, sub="status"), decision.status_patch)
                log.warning("node %s stopped heartbeating: Ready=Unknown", name)
            applied.append(decision)
        return applied


def run(
    api: KubeClient | client.ApiClient | Any,
    stop_event: threading.Event | Any,
    grace_s: float = DEFAULT_GRACE_S,
    interval_s: float = 5.0,
) -> None:
    """Check every node every `interval_s` until `stop_event` is set.

    `api` is the shared JSON client, the official client's `ApiClient`, or anything holding
    one as `.api_client`; `stop_event` a `threading.Event`, or anything with `wait(seconds)` and
    either `is_set()` or a `stopped` property.
    """
    kube = api if isinstance(api, KubeClient) else KubeClient(getattr(api, "api_client", api))
    controller = NodeLifecycleController(kube, grace_s)

    def stopped() -> bool:
        if hasattr(stop_event, "is_set"):
            return bool(stop_event.is_set())
        return bool(cast(Any, stop_event).stopped)

    while not stopped():
        try:
            controller.reconcile_once()
        except Exception as exc:  # the API may be restarting: try again next round
            log.warning("node lifecycle pass failed: %s", exc)
        stop_event.wait(interval_s)
