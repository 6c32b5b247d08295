"""The agent re-checks every bound pod against its own ledger of GPU slots: a pod that
would over-commit a GPU fails with reason GPUOvercommitted, a Warning Event and the pod
condition GPUSlotsAvailable=False — whether it came through an admin's pre-bound create, a
second scheduler's binding, or an edit of the store. A user cannot pre-bind at all."""

from __future__ import annotations

import secrets
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_agent_e2e import NODE, NS, Cluster, container_pgid, wait_for

from gpushare.agent.gpu.gpu_share import GpuShare
from gpushare.agent.pods.ledger import CONDITION, OVERCOMMITTED, overcommit
from gpushare.kube.client import EVENTS, PODS, ApiError, KubeClient
from gpushare.model.gpu_inventory import GpuDevice
from store_edit import store_put


def _share(portion: float, *indices: int) -> GpuShare:
    devices = tuple(GpuDevice(i, f"GPU-{i}", "NVIDIA-H100", 81559, 132) for i in indices)
    milli = round(portion * 1000)
    return GpuShare(devices, milli, 81559 * milli // 1000)


def test_ledger_sums_portions_per_gpu() -> None:
    assert overcommit([_share(0.5, 0), _share(0.5, 1)], _share(0.5, 0)) is None
    refused = overcommit([_share(0.5, 0), _share(0.3, 0)], _share(0.3, 0))
    assert refused is not None and "GPU 0" in refused
    assert overcommit([_share(1.0, 1)], _share(1.0, 0)) is None
    assert overcommit([_share(1.0, 1)], _share(1.0, 0, 1)) is not None
    assert overcommit([_share(0.33, 0)] * 3, None) is None
    assert overcommit([_share(0.33, 0), _share(0.33, 0)], _share(0.34, 0)) is None


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("agent-ledger"))
    c.start_agent()
    yield c
    if c.agent is not None:
        c.kill_agent(signal.SIGTERM)
    c.server.stop()


def _slots(index: str, portion: str) -> dict[str, str]:
    return {"gpushare.io/gpu-indices": index, "gpushare.io/gpu-portion": portion,
            "gpushare.io/gpu-memory-mib": "20000"}


def _assert_refused(cluster: Cluster, pod: dict[str, Any]) -> None:
    """Failed with GPUOvercommitted, the condition and a Warning Event, never started."""
    name = pod["metadata"]["name"]
    assert pod["status"]["reason"] == OVERCOMMITTED
    conditions = {c["type"]: c for c in pod["status"]["conditions"]}
    assert conditions[CONDITION]["status"] == "False"
    assert conditions[CONDITION]["reason"] == OVERCOMMITTED
    assert "over-committed" in conditions[CONDITION]["message"]
    assert conditions["Ready"]["status"] == "False"
    assert conditions["PodScheduled"]["status"] == "True"
    assert not pod["status"].get("containerStatuses") or all(
        "running" not in (s.get("state") or {}) for s in pod["status"]["containerStatuses"])
    events = wait_for(lambda: [e for e in cluster.kube.list(EVENTS.collection(NS))["items"]
                               if e.get("reason") == OVERCOMMITTED
                               and e["involvedObject"]["name"] == name])
    assert events[0]["type"] == "Warning"


def test_a_pod_that_would_over_commit_a_gpu_is_not_started(cluster: Cluster) -> None:
    sleeper = [{"name": "main", "command": ["sleep", "60"]}]
    cluster.create_pod("holder", [dict(c) for c in sleeper], annotations=_slots("0", "0.6"))
    cluster.wait_phase("holder", "Running")
    cluster.create_pod("too-much", [dict(c) for c in sleeper], annotations=_slots("0", "0.5"))
    pod = cluster.wait_phase("too-much", "Failed")
    assert pod["status"]["reason"] == OVERCOMMITTED
    assert "GPU 0" in pod["status"]["message"]
    assert not pod["status"].get("containerStatuses") or all(
        "running" not in (s.get("state") or {}) for s in pod["status"]["containerStatuses"])
    _assert_refused(cluster, pod)
    # What fits still runs.
    cluster.create_pod("fits", [dict(c) for c in sleeper], annotations=_slots("0", "0.4"))
    cluster.wait_phase("fits", "Running")


def _user(cluster: Cluster, name: str, rules: list[dict[str, Any]]) -> KubeClient:
    """A client for a new user `name` holding `rules` cluster-wide."""
    cluster.kube.create("/apis/rbac.authorization.k8s.io/v1/clusterroles", {
        "metadata": {"name": name}, "rules": rules})
    cluster.kube.create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name}]})
    token = secrets.token_urlsafe(24)
    cluster.server.tokens.add(token, name, [])
    path = cluster.root / f"{name}.kubeconfig"
    cluster.server.write_kubeconfig(path, token=token, user=name)
    return KubeClient.from_kubeconfig(str(path))


def _unbound(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"schedulerName": "nobody", "restartPolicy": "Never",
                     "terminationGracePeriodSeconds": 5,
                     "containers": [{"name": "main", "image": "busybox",
                                     "command": ["sleep", "60"]}]}}


def test_a_user_cannot_pre_bind_a_pod(cluster: Cluster) -> None:
    user = _user(cluster, "pod-maker", [{"apiGroups": [""], "resources": ["pods"],
                                         "verbs": ["create", "get", "patch", "update"]}])
    body = _unbound("user-prebound")
    body["spec"]["nodeName"] = NODE
    body["metadata"]["annotations"] = _slots("1", "1")
    with pytest.raises(ApiError) as refused:
        user.create(PODS.collection(NS), body)
    assert refused.value.status == 403
    assert "spec.nodeName" in str(refused.value.body)
    assert cluster.pod("user-prebound") is None
    # Nor by an edit of the slot annotations of a pod of hers.
    user.create(PODS.collection(NS), _unbound("user-pod"))
    with pytest.raises(ApiError) as edited:
        user.merge_patch(PODS.item("user-pod", NS), {"metadata": {"annotations": _slots(
            "1", "1")}})
    assert edited.value.status == 403
    assert "gpushare.io/gpu-indices" in str(edited.value.body)
    user.close()


def _bind(client: KubeClient, name: str, index: str, portion: str) -> None:
    client.create(PODS.item(name, NS, "binding"), {
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": name, "namespace": NS, "annotations": _slots(index, portion)},
        "target": {"apiVersion": "v1", "kind": "Node", "name": NODE}})


def test_a_second_binding_onto_a_full_gpu_is_refused_by_the_ledger(cluster: Cluster) -> None:
    # Two schedulers that both believe GPU 1 free (a split brain): the API lets each bind.
    scheduler = _user(cluster, "second-scheduler", [
        {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]}])
    for name in ("first-bound", "second-bound"):
        cluster.kube.create(PODS.collection(NS), _unbound(name))
    _bind(scheduler, "first-bound", "1", "0.7")
    cluster.wait_phase("first-bound", "Running")
    _bind(scheduler, "second-bound", "1", "0.7")
    _assert_refused(cluster, cluster.wait_phase("second-bound", "Failed"))
    scheduler.close()


def test_a_pod_written_into_the_store_onto_a_full_gpu_is_refused(cluster: Cluster) -> None:
    # GPU 1 holds 0.7 (the test before); a pod edited into the store asks for 0.5 more.
    store_put(cluster.server, "pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "store-bound", "namespace": NS, "uid": "uid-store-bound",
                     "creationTimestamp": "2026-01-01T00:00:00Z",
                     "annotations": _slots("1", "0.5")},
        "spec": {"nodeName": NODE, "restartPolicy": "Never",
                 "containers": [{"name": "main", "image": "busybox",
                                 "command": ["sleep", "60"]}]}})
    _assert_refused(cluster, cluster.wait_phase("store-bound", "Failed"))


def test_after_a_restart_the_pod_on_an_ended_pods_gpu_is_adopted_not_refused(
        tmp_path: Path) -> None:
    """A pod ended (Succeeded, not deleted) and the next one was bound to its GPU. A
    restarted agent meets both in its first list, the ended one first: the ended pod must
    hold no share from the moment it is picked up again, else the running pod after it is
    refused by the ledger (Failed, while its processes go on unsupervised)."""
    c = Cluster(tmp_path)
    c.start_agent()
    try:
        c.create_pod("a-ended", [{"name": "main", "command": ["true"]}],
                     annotations=_slots("0", "1"))
        c.wait_phase("a-ended", "Succeeded")
        c.create_pod("b-next", [{"name": "main", "command": ["sleep", "60"]}],
                     annotations=_slots("0", "1"))
        c.wait_phase("b-next", "Running")
        pgid = container_pgid(c, "b-next", "main")
        c.kill_agent(signal.SIGKILL)
        c.start_agent()
        # a pod created after the restart: once it runs, the agent went through the two
        c.create_pod("c-probe", [{"name": "main", "command": ["sleep", "60"]}])
        c.wait_phase("c-probe", "Running")
        status = (c.pod("b-next") or {}).get("status") or {}
        assert status.get("phase") == "Running", status
        assert container_pgid(c, "b-next", "main") == pgid  # adopted, not started again
    finally:
        if c.agent is not None:
            c.kill_agent(signal.SIGTERM)
        c.server.stop()
