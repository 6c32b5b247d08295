"""Any NoSchedule taint a user puts on a node (``kubectl taint``) keeps out the pods that
do not tolerate it, as kube-scheduler does; removing the taint lets them in."""

from __future__ import annotations

from e2e_support import add_node, fraction_pod, team_queue, wait_for

QUEUE = team_queue()


def pod(name: str, tolerate: bool) -> str:
    toleration = ("  tolerations: [{key: dedicated, operator: Equal, value: inference,"
                  " effect: NoSchedule}]\n") if tolerate else ""
    return fraction_pod(name, "0.5", toleration)


def test_a_user_taint_keeps_out_pods_without_the_toleration(server, controllers, kubectl):
    add_node(server.kubeconfig, "box", "1xL40S")
    kubectl.run("taint", "nodes", "box", "dedicated=inference:NoSchedule")
    kubectl.run("apply", "-f", "-", stdin=QUEUE)
    kubectl.run("apply", "-f", "-", stdin=pod("plain", tolerate=False))
    kubectl.run("apply", "-f", "-", stdin=pod("tolerant", tolerate=True))
    assert wait_for(lambda: kubectl.json("get", "pod", "tolerant")["spec"].get("nodeName"),
                    what="the tolerating pod bound") == "box"

    def unschedulable():
        conditions = kubectl.json("get", "pod", "plain")["status"].get("conditions") or []
        return any(c["type"] == "PodScheduled" and c["status"] == "False" for c in conditions)

    wait_for(unschedulable, what="the plain pod PodScheduled=False")
    assert not kubectl.json("get", "pod", "plain")["spec"].get("nodeName")

    kubectl.run("taint", "nodes", "box", "dedicated-")
    assert wait_for(lambda: kubectl.json("get", "pod", "plain")["spec"].get("nodeName"),
                    what="the plain pod bound once the taint is gone") == "box"
