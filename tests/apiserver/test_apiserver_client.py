"""CRUD and watch through the official Kubernetes Python client."""

from __future__ import annotations

import pytest
from apiserver_harness import Cluster
from kubernetes import client, watch
from kubernetes.client.rest import ApiException


def _pod(name: str, **annotations: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": annotations or None},
            "spec": {"containers": [{"name": "main", "image": "busybox",
                                     "command": ["sleep", "60"]}]}}


def test_pod_create_get_list_delete(core: client.CoreV1Api) -> None:
    created = core.create_namespaced_pod("default", _pod("crud-1"))
    assert created.metadata.uid
    assert created.spec.scheduler_name == "gpushare"
    assert created.status.phase == "Pending"
    got = core.read_namespaced_pod("crud-1", "default")
    assert got.metadata.resource_version == created.metadata.resource_version
    names = [p.metadata.name for p in core.list_namespaced_pod("default").items]
    assert "crud-1" in names
    core.delete_namespaced_pod("crud-1", "default")
    with pytest.raises(ApiException) as e:
        core.read_namespaced_pod("crud-1", "default")
    assert e.value.status == 404


def test_system_namespaces_and_default_service_account(core: client.CoreV1Api) -> None:
    names = {n.metadata.name for n in core.list_namespace().items}
    assert {"default", "kube-system", "kube-public", "kube-node-lease"} <= names
    ns = core.read_namespace("kube-system")
    assert ns.metadata.labels["kubernetes.io/metadata.name"] == "kube-system"
    assert core.read_namespaced_service_account("default", "default").metadata.name == "default"


def test_node_create_and_status(core: client.CoreV1Api) -> None:
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "node-a", "labels": {"nvidia.com/gpu.count": "1"}},
            "status": {"capacity": {"nvidia.com/gpu": "1"}}}
    created = core.create_node(node)
    assert created.status.capacity["nvidia.com/gpu"] == "1"
    patched = core.patch_node_status("node-a", {"status": {"conditions": [
        {"type": "Ready", "status": "True"}]}})
    assert patched.status.conditions[0].type == "Ready"
    core.delete_node("node-a")


def test_stale_update_conflicts(core: client.CoreV1Api) -> None:
    cm = core.create_namespaced_config_map("default", {"metadata": {"name": "cfg"},
                                                       "data": {"a": "1"}})
    cm.data = {"a": "2"}
    core.replace_namespaced_config_map("cfg", "default", cm)
    cm.data = {"a": "3"}  # still carries the old resourceVersion
    with pytest.raises(ApiException) as e:
        core.replace_namespaced_config_map("cfg", "default", cm)
    assert e.value.status == 409
    assert '"reason":"Conflict"' in e.value.body


def test_generate_name(core: client.CoreV1Api) -> None:
    cm = core.create_namespaced_config_map("default", {"metadata": {"generateName": "gen-"}})
    assert cm.metadata.name.startswith("gen-") and len(cm.metadata.name) == len("gen-") + 5


def test_watch_streams_added_modified_deleted(core: client.CoreV1Api) -> None:
    start = core.list_namespaced_config_map("default").metadata.resource_version
    core.create_namespaced_config_map("default", {"metadata": {"name": "w1",
                                                               "labels": {"w": "yes"}}})
    core.patch_namespaced_config_map("w1", "default", {"data": {"k": "v"}})
    core.delete_namespaced_config_map("w1", "default")
    w = watch.Watch()
    seen = []
    for event in w.stream(core.list_namespaced_config_map, "default", label_selector="w=yes",
                          resource_version=start, timeout_seconds=2):
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) == 3:
            w.stop()
    assert seen == [("ADDED", "w1"), ("MODIFIED", "w1"), ("DELETED", "w1")]


def test_queue_crud_through_custom_objects(custom: client.CustomObjectsApi) -> None:
    body = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
            "metadata": {"name": "team-a"},
            "spec": {"resources": {"gpu": {"quota": 1, "limit": -1, "overQuotaWeight": 1}}}}
    custom.create_cluster_custom_object("scheduling.run.ai", "v2", "queues", body)
    got = custom.get_cluster_custom_object("scheduling.run.ai", "v2", "queues", "team-a")
    assert got["spec"]["resources"]["gpu"]["quota"] == 1
    custom.delete_cluster_custom_object("scheduling.run.ai", "v2", "queues", "team-a")


def test_kubectl_get_namespaces(cluster: Cluster) -> None:
    out = cluster.kubectl("get", "namespaces").stdout
    assert out.split("\n")[0].split() == ["NAME", "STATUS", "AGE"]
    assert "kube-system" in out
