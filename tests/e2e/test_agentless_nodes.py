"""Agentless nodes (``gpushare node add``): tainted so that only pods that tolerate them
land there, kept alive by the controllers (Lease and Ready renewed), and their pods
collected when the node is deleted, as kube-controller-manager's pod GC does."""

from __future__ import annotations

import time

from e2e_support import add_node, fraction_pod, team_queue, wait_for

QUEUE = team_queue()


def pod(name: str, tolerate: bool) -> str:
    toleration = ("  tolerations: [{key: gpushare.io/no-agent, operator: Exists,"
                  " effect: NoSchedule}]\n") if tolerate else ""
    return fraction_pod(name, "0.5", toleration)


def test_agentless_node_is_tainted_renewed_and_its_pods_collected(server, controllers,
                                                                  kubectl):
    add_node(server.kubeconfig, "planned", "1xL40S", tainted=True)
    node = kubectl.json("get", "node", "planned")
    assert {"key": "gpushare.io/no-agent", "value": "true", "effect": "NoSchedule"} in (
        node["spec"]["taints"])
    kubectl.run("apply", "-f", "-", stdin=QUEUE)
    kubectl.run("apply", "-f", "-", stdin=pod("ordinary", tolerate=False))
    kubectl.run("apply", "-f", "-", stdin=pod("planning", tolerate=True))
    wait_for(lambda: kubectl.json("get", "pod", "planning")["spec"].get("nodeName"),
             what="the tolerating pod bound")

    def unschedulable():
        conditions = kubectl.json("get", "pod", "ordinary")["status"].get("conditions") or []
        return any(c["type"] == "PodScheduled" and c["status"] == "False" for c in conditions)

    wait_for(unschedulable, what="the ordinary pod PodScheduled=False")
    assert not kubectl.json("get", "pod", "ordinary")["spec"].get("nodeName")

    # The controllers hold its Lease and renew Ready, as an agent would.
    lease = wait_for(lambda: kubectl.run("get", "lease", "-n", "kube-node-lease", "planned",
                                         "-o", "json", check=False).returncode == 0
                     and kubectl.json("get", "lease", "-n", "kube-node-lease", "planned"),
                     what="the node's Lease")
    assert lease["spec"]["holderIdentity"] == "gpushare-controllers"

    def heartbeat():
        ready = next(c for c in kubectl.json("get", "node", "planned")["status"]["conditions"]
                     if c["type"] == "Ready")
        return ready["status"], ready["lastHeartbeatTime"]

    first = heartbeat()
    time.sleep(1.1)  # heartbeats are in whole seconds
    wait_for(lambda: heartbeat() != first and heartbeat()[0] == "True", timeout=30,
             what="Ready renewed")
    renewed = kubectl.json("get", "lease", "-n", "kube-node-lease", "planned")
    assert renewed["spec"]["renewTime"] != lease["spec"]["renewTime"]

    # Deleting the node deletes its pods: none is left Terminating.
    kubectl.run("delete", "node", "planned")
    wait_for(lambda: kubectl.run("get", "pod", "planning", check=False).returncode != 0,
             timeout=30, what="the node's pod deleted")
    assert kubectl.json("get", "pod", "ordinary")["metadata"].get("deletionTimestamp") is None
