"""Attack (or accident): a node agent's clock is 40 s off. The node-lifecycle controller
compared the agent's heartbeat stamps with its own wall clock, so a node whose clock runs
behind was tainted unreachable while it heartbeat (its pods' new work refused), and a node
whose clock runs ahead stayed Ready for 40 s after it died (pods kept being placed on a
dead node). Freshness is now judged by when the controller saw the heartbeat change.

A real API server process; heartbeats written as an agent writes them (the Node's Ready
condition through the status subresource, the Lease in kube-node-lease) with a skewed
clock; the controller's own loop (`node_lifecycle.run`) with a 2 s grace."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from apiserver_proc import start, stop

from gpushare.api.timefmt import rfc3339, rfc3339_micro
from gpushare.controllers.nodes import node_lifecycle
from gpushare.kube.client import NODES, KubeClient, Stopper
from gpushare.kube.lease import renew_node_lease
from waiting import wait_for

GRACE_S = 2.0
SKEW_S = 40.0


@pytest.fixture()
def kube(tmp_path: Path) -> Iterator[KubeClient]:
    proc, client = start(tmp_path)
    stopper = Stopper()
    kube = KubeClient.from_kubeconfig(str(tmp_path / "admin.kubeconfig"))
    controller = threading.Thread(target=node_lifecycle.run, daemon=True,
                                  args=(kube, stopper.event, GRACE_S, 0.2))
    controller.start()
    yield kube
    stopper.stop()
    controller.join(10)
    stop(proc, client)


def _beat(kube: KubeClient, name: str, skew: float) -> None:
    """One heartbeat as the agent writes it, stamped with a clock `skew` seconds off."""
    stamp = time.time() + skew
    kube.merge_patch(NODES.item(name, sub="status"), {"status": {"conditions": [
        {"type": "Ready", "status": "True", "reason": "AgentReady",
         "lastHeartbeatTime": rfc3339(stamp), "lastTransitionTime": rfc3339(stamp)}]}})
    renew_node_lease(kube, name, name, 40, rfc3339_micro(stamp))


def _tainted(kube: KubeClient, name: str) -> bool:
    node = kube.get(NODES.item(name)) or {}
    return any(t.get("key") == node_lifecycle.UNREACHABLE_TAINT
               for t in (node.get("spec") or {}).get("taints") or ())


def _node(kube: KubeClient, name: str) -> None:
    kube.create(NODES.collection(), {"apiVersion": "v1", "kind": "Node",
                                     "metadata": {"name": name}, "spec": {}})


def test_a_live_node_with_a_clock_behind_is_not_tainted(kube: KubeClient) -> None:
    _node(kube, "behind")
    stop_beating = threading.Event()

    def agent() -> None:
        while not stop_beating.is_set():
            _beat(kube, "behind", -SKEW_S)
            stop_beating.wait(0.3)

    writer = threading.Thread(target=agent, daemon=True)
    writer.start()
    try:
        deadline = time.monotonic() + 4 * GRACE_S  # many of the controller's passes
        while time.monotonic() < deadline:
            assert not _tainted(kube, "behind"), "a heartbeating node was tainted unreachable"
            time.sleep(0.2)
        ready = [c for c in kube.get(NODES.item("behind"))["status"]["conditions"]
                 if c["type"] == "Ready"]
        assert ready[0]["status"] == "True"
    finally:
        stop_beating.set()
        writer.join(10)
    # and once it stops heartbeating, it is found out by the controller's clock
    wait_for(lambda: _tainted(kube, "behind"), 20, "the silent node tainted")


def test_a_dead_node_with_a_clock_ahead_is_found_out(kube: KubeClient) -> None:
    _node(kube, "ahead")
    for _ in range(3):
        _beat(kube, "ahead", +SKEW_S)
        time.sleep(0.3)
    # the agent dies; its last stamps lie 40 s in the future
    wait_for(lambda: _tainted(kube, "ahead"), SKEW_S / 2,
             "the dead node tainted before its stamps' future ran out")

    def ready_unknown() -> bool:  # the condition is a write of its own, beside the taint's
        ready = [c for c in kube.get(NODES.item("ahead"))["status"]["conditions"]
                 if c["type"] == "Ready"]
        return ready[0]["status"] == "Unknown" and ready[0]["reason"] == "NodeStatusUnknown"

    wait_for(ready_unknown, 10, "the dead node's Ready condition Unknown")
