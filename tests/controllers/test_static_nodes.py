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
