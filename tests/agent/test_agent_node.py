"""The Node object the agent writes, and the node-lifecycle controller's decisions (pure)."""

from __future__ import annotations

import json

from gpushare.agent.node.inventory import HostResources, declared_gpus
from gpushare.agent.node.node import node_object
from gpushare.api.timefmt import parse_rfc3339, rfc3339, rfc3339_micro
from gpushare.controllers.nodes.node_lifecycle import UNREACHABLE_TAINT, decide

NOW = 1_800_000_000.0


def test_node_object_carries_inventory_capacity_and_log_port() -> None:
    inventory = declared_gpus("n1", "8xH100")
    node = node_object("n1", inventory, HostResources(16, 64 << 30), "none (declared GPUs)",
                       "127.0.0.1", 10250, NOW, "0.1.0")
    meta, status = node["metadata"], node["status"]
    assert meta["labels"]["nvidia.com/gpu.count"] == "8"
    assert meta["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert meta["annotations"]["gpushare.io/gpus-declared"] == "true"
    assert len(json.loads(meta["annotations"]["gpushare.io/gpus"])) == 8
    assert status["capacity"] == {"cpu": "16", "memory": f"{64 << 20}Ki", "pods": "110",
                                  "nvidia.com/gpu": "8"}
    assert status["daemonEndpoints"]["kubeletEndpoint"]["Port"] == 10250
    ready = status["conditions"][0]
    assert ready["type"] == "Ready" and ready["status"] == "True"
    assert parse_rfc3339(ready["lastHeartbeatTime"]) == NOW


def node(heartbeat: float | None, status: str = "True", static: bool = False,
         taints: list | None = None) -> dict:
    conditions = []
    if heartbeat is not None:
        conditions.append({"type": "Ready", "status": status,
                           "lastHeartbeatTime": rfc3339(heartbeat),
                           "lastTransitionTime": rfc3339(heartbeat)})
    annotations = {"gpushare.io/static-node": "true"} if static else {}
    return {"metadata": {"name": "n1", "annotations": annotations,
                         "creationTimestamp": rfc3339(NOW - 1000)},
            "spec": {"taints": taints} if taints else {},
            "status": {"conditions": conditions}}


def test_a_fresh_heartbeat_changes_nothing() -> None:
    assert decide(node(NOW - 5), None, NOW, 40) is None


def test_a_stale_heartbeat_turns_ready_unknown_and_taints() -> None:
    decision = decide(node(NOW - 60), None, NOW, 40)
    assert decision is not None
    ready = decision.status_patch["status"]["conditions"][-1]
    assert ready["status"] == "Unknown" and ready["reason"] == "NodeStatusUnknown"
    assert ready["lastHeartbeatTime"] == rfc3339(NOW - 60)  # kept, not faked
    assert decision.spec_patch["spec"]["taints"][0]["key"] == UNREACHABLE_TAINT
    # already Unknown and tainted: nothing more to do
    tainted = node(NOW - 60, "Unknown", taints=[{"key": UNREACHABLE_TAINT,
                                                 "effect": "NoSchedule"}])
    assert decide(tainted, None, NOW, 40) is None


def test_a_fresh_lease_counts_as_a_heartbeat() -> None:
    lease = {"spec": {"renewTime": rfc3339_micro(NOW - 2)}}
    assert decide(node(NOW - 60), lease, NOW, 40) is None


def test_static_nodes_are_left_alone() -> None:
    assert decide(node(None, static=True), None, NOW, 40) is None
    assert decide(node(NOW - 10_000, static=True), None, NOW, 40) is None


def test_a_node_that_never_heartbeat_goes_unknown_after_the_grace() -> None:
    decision = decide(node(None), None, NOW, 40)
    assert decision is not None and decision.status_patch is not None


def test_the_taint_goes_when_the_node_is_ready_again() -> None:
    back = node(NOW - 1, "True", taints=[{"key": UNREACHABLE_TAINT, "effect": "NoSchedule"},
                                         {"key": "other", "effect": "NoSchedule"}])
    decision = decide(back, None, NOW, 40)
    assert decision is not None and decision.status_patch is None
    assert decision.spec_patch == {"spec": {"taints": [{"key": "other",
                                                        "effect": "NoSchedule"}]}}


def test_run_accepts_a_holder_of_the_api_client_and_a_stopper_without_is_set() -> None:
    import threading

    from kubernetes import client as k8s_client

    from gpushare.controllers.nodes import node_lifecycle
    from gpushare.kube.client import KubeClient

    class Holder:  # anything that holds the official client's ApiClient
        api_client = k8s_client.ApiClient()

    class Stopper:  # like the controllers' stopper: `stopped` and `wait`
        def __init__(self) -> None:
            self.stopped = False
            self.passes = 0

        def wait(self, seconds: float) -> bool:
            self.passes += 1
            self.stopped = True
            return True

    calls = []
    original = node_lifecycle.NodeLifecycleController.reconcile_once
    node_lifecycle.NodeLifecycleController.reconcile_once = lambda self: calls.append(self)
    try:
        stopper = Stopper()
        node_lifecycle.run(Holder(), stopper, interval_s=0.01)
        assert len(calls) == 1 and stopper.passes == 1
        assert calls[0].kube.api_client is Holder.api_client
        event = threading.Event()
        event.set()
        node_lifecycle.run(Holder(), event)
        assert len(calls) == 1  # already stopped: no pass
        shared = KubeClient(Holder.api_client)
        node_lifecycle.run(shared, Stopper(), interval_s=0.01)
        assert len(calls) == 2 and calls[1].kube is shared  # the shared client as it is
    finally:
        node_lifecycle.NodeLifecycleController.reconcile_once = original


def test_a_watcher_that_sees_ready_unknown_already_sees_the_taint(tmp_path) -> None:
    """Through a real API server: every watch event of the node going stale that shows
    Ready=Unknown carries the unreachable taint (one write before the other, never the
    condition alone)."""
    import threading

    from gpushare.cli.compose import api_server
    from gpushare.controllers.nodes.node_lifecycle import NodeLifecycleController
    from gpushare.kube.client import NODES, KubeClient, Stopper
    from gpushare.kube.informer import Informer

    server = api_server(tmp_path / "api").start()
    kube = KubeClient.from_kubeconfig(str(tmp_path / "api" / "admin.kubeconfig"))
    stopper = Stopper()
    seen: list[tuple[str, bool]] = []
    changed = threading.Condition()

    def record(kind: str, obj: dict, old: dict | None) -> None:
        ready = [c for c in obj.get("status", {}).get("conditions") or ()
                 if c.get("type") == "Ready"]
        taints = (obj.get("spec") or {}).get("taints") or ()
        with changed:
            seen.append((ready[0]["status"] if ready else "",
                         any(t.get("key") == UNREACHABLE_TAINT for t in taints)))
            changed.notify_all()

    try:
        stale = node(NOW - 60)
        created = kube.create(NODES.collection(), {"apiVersion": "v1", "kind": "Node",
                                                   "metadata": {"name": "n1"}, "spec": {}})
        kube.replace(NODES.item("n1", sub="status"), {**created, "status": stale["status"]})
        informer = Informer(kube, NODES, stopper)
        informer.add_handler(record)
        informer.start()
        assert informer.wait_synced(10)
        applied = NodeLifecycleController(kube, grace_s=40).reconcile_once(now=NOW)
        assert [d.node for d in applied] == ["n1"]
        with changed:
            assert changed.wait_for(lambda: ("Unknown", True) in seen, 10), seen
        unknown = [tainted for status, tainted in seen if status == "Unknown"]
        assert unknown and all(unknown), seen
        assert seen[0] == ("True", False), seen
    finally:
        stopper.stop()
        server.stop()
