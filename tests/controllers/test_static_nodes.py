"""``gpushare node add``: the Node body and its errors."""

from __future__ import annotations

import json

import pytest

from gpushare.controllers.nodes.static_nodes import (
    STATIC_NODE_ANNOTATION,
    NodeSpecError,
    parse_labels,
    static_node,
)


def test_static_node_declares_gpus_and_is_ready_and_marked_static():
    node = static_node("n1", "8xH100", "64", "512Gi", {"zone": "a"}, "2026-01-01T00:00:00Z")
    meta, status = node["metadata"], node["status"]
    assert meta["annotations"][STATIC_NODE_ANNOTATION] == "true"
    assert meta["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert meta["labels"]["nvidia.com/gpu.count"] == "8" and meta["labels"]["zone"] == "a"
    gpus = json.loads(meta["annotations"]["gpushare.io/gpus"])
    assert [g["index"] for g in gpus] == list(range(8))
    assert status["capacity"] == {"cpu": "64", "memory": "512Gi", "pods": "110",
                                  "nvidia.com/gpu": "8"}
    assert status["conditions"][0]["type"] == "Ready"
    assert status["conditions"][0]["status"] == "True"


@pytest.mark.parametrize(("args", "option"), [
    (("8xFOO", "64", "1Gi"), "--gpus"),
    (("1xL4", "many", "1Gi"), "--cpu"),
    (("1xL4", "4", "lots"), "--memory"),
    (("1xL4", "0", "1Gi"), "--cpu"),
])
def test_bad_options_name_the_option(args, option):
    with pytest.raises(NodeSpecError, match=option):
        static_node("n", *args, {}, "now")


def test_labels_need_key_and_value():
    assert parse_labels(["a=b", "c="]) == {"a": "b", "c": ""}
    with pytest.raises(NodeSpecError, match="--label"):
        parse_labels(["novalue"])


def test_official_client_reads_agentless_and_partial_nodes(api, tmp_path):
    """The official client's typed Node refuses a nodeInfo without its required fields:
    an agentless node carries them all, and the server fills any a writer left out."""
    from kubernetes import client as k8s
    from kubernetes import config

    from gpushare.controllers.nodes.static_nodes import register_static_node
    from gpushare.kube.client import NODES

    register_static_node(api, static_node("n1", "1xL4", "4", "8Gi", {}, "2026-01-01T00:00:00Z"))
    partial = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n2"},
               "status": {"nodeInfo": {"kubeletVersion": "v1"}}}
    api.create(NODES.collection(), partial)
    core = k8s.CoreV1Api(config.new_client_from_config(str(tmp_path / "admin.kubeconfig")))
    nodes = {n.metadata.name: n for n in core.list_node().items}
    assert set(nodes) == {"n1", "n2"}
    assert nodes["n1"].status.node_info.operating_system == "linux"
    assert nodes["n2"].status.node_info.kubelet_version == "v1"
    assert nodes["n2"].status.node_info.machine_id == ""


def test_a_node_stored_without_nodeinfo_fields_is_completed_at_start(tmp_path):
    """A Node written before the server filled nodeInfo (an older version's store) is
    completed when the server starts, so typed readers never meet it broken."""
    from kubernetes import client as k8s
    from kubernetes import config

    from gpushare.apiserver.http.server import ApiServer
    from store_edit import store_put

    data = tmp_path / "data"
    server = ApiServer(data, "127.0.0.1", 0)
    server.start()
    try:
        store_put(server, "nodes", {"apiVersion": "v1", "kind": "Node",
                                    "metadata": {"name": "old", "uid": "u-old",
                                                 "creationTimestamp": "2026-01-01T00:00:00Z"},
                                    "status": {"nodeInfo": {"kubeletVersion": "v0"}}})
    finally:
        server.stop()
    server = ApiServer(data, "127.0.0.1", 0)
    server.start()
    try:
        kubeconfig = server.write_kubeconfig(tmp_path / "k")
        core = k8s.CoreV1Api(config.new_client_from_config(str(kubeconfig)))
        (node,) = core.list_node().items
        assert node.status.node_info.kubelet_version == "v0"
        assert node.status.node_info.boot_id == ""
    finally:
        server.stop()
