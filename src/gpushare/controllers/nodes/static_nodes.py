"""Nodes with declared GPUs and no agent: ``gpushare node add``.

Such a node is Ready for as long as it exists: it never heartbeats, so it carries the
annotation ``gpushare.io/static-node: "true"``, and the node-lifecycle controller renews
its Lease and Ready condition. It is tainted ``gpushare.io/no-agent=true:NoSchedule``:
pods bound there never run, so only pods that tolerate it land there (``--no-taint``
leaves it off, for scheduling tests).
"""

from __future__ import annotations

import platform

import orjson

from gpushare.api.contracts import (
    GPU_RESOURCE,
    HOSTNAME_LABEL,
    NODE_GPUS_ANNOTATION,
    NODE_GPUS_DECLARED_ANNOTATION,
    STATIC_NODE_ANNOTATION,
)
from gpushare.api.objects import Meta, complete_node_info
from gpushare.api.quantity import format_bytes, to_int, to_milli
from gpushare.controllers.nodes.no_agent import TAINT
from gpushare.kube.client import NODES, ApiError, KubeClient
from gpushare.model.gpu_inventory import declared_gpus

GPUS_ANNOTATION = NODE_GPUS_ANNOTATION
GPUS_DECLARED_ANNOTATION = NODE_GPUS_DECLARED_ANNOTATION


class NodeSpecError(ValueError):
    """A node description that cannot be registered; the message names the option."""


def parse_labels(items: list[str]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise NodeSpecError(f"--label {item!r}: expected KEY=VALUE")
        labels[key] = value
    return labels


def static_node(
    name: str, gpus: str | None, cpu: str, memory: str, labels: dict[str, str], now: str,
    max_pods: int = 110, taint: bool = True,
) -> dict:
    """The Node object of a static node (status included)."""
    try:
        cpu_milli = to_milli(cpu)
    except ValueError:
        raise NodeSpecError(f"--cpu {cpu!r}: not a quantity (e.g. 64 or 500m)") from None
    try:
        memory_bytes = to_int(memory)
    except ValueError:
        raise NodeSpecError(f"--memory {memory!r}: not a quantity (e.g. 512Gi)") from None
    if cpu_milli <= 0:
        raise NodeSpecError(f"--cpu {cpu!r}: must be positive")
    if memory_bytes <= 0:
        raise NodeSpecError(f"--memory {memory!r}: must be positive")
    all_labels = {
        HOSTNAME_LABEL: name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
    }
    annotations = {STATIC_NODE_ANNOTATION: "true"}
    capacity = {
        "cpu": f"{cpu_milli // 1000}" if cpu_milli % 1000 == 0 else f"{cpu_milli}m",
        "memory": format_bytes(memory_bytes),
        "pods": str(max_pods),
    }
    if gpus:
        try:
            inventory = declared_gpus(name, gpus)
        except ValueError as error:
            raise NodeSpecError(str(error)) from None
        first = inventory.devices[0]
        all_labels.update({
            "nvidia.com/gpu.product": first.product,
            "nvidia.com/gpu.memory": str(first.memory_mib),
            "nvidia.com/gpu.count": str(inventory.count),
        })
        annotations[GPUS_ANNOTATION] = orjson.dumps(
            [{"index": d.index, "uuid": d.uuid, "product": d.product, "memoryMiB": d.memory_mib}
             for d in inventory.devices]
        ).decode()
        annotations[GPUS_DECLARED_ANNOTATION] = "true"
        capacity[GPU_RESOURCE] = str(inventory.count)
    all_labels.update(labels)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": all_labels, "annotations": annotations},
        # Nothing runs here: only pods that tolerate the taint land (controllers/nodes/no_agent.py).
        "spec": {"taints": [dict(TAINT)]} if taint else {},
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "StaticNode",
                    "message": "declared with gpushare node add; no agent heartbeats",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": complete_node_info({
                "kubeletVersion": "gpushare-static", "operatingSystem": "linux",
                "architecture": "amd64", "kernelVersion": platform.release(),
                "osImage": "gpushare static node (no agent)",
                "containerRuntimeVersion": "none://"}),
        },
    }


def register_static_node(client: KubeClient, body: dict) -> dict:
    """Create or update the node, then write its status (a create may drop status)."""
    meta = Meta.of(body)
    name = meta.name
    try:
        created = client.create(NODES.collection(), body)
    except ApiError as error:
        if error.status != 409:
            raise
        taints = [t for t in (client.get(NODES.item(name)) or {}).get("spec", {}).get("taints")
                  or [] if t.get("key") != TAINT["key"]] + body["spec"].get("taints", [])
        created = client.merge_patch(
            NODES.item(name), {"metadata": {"labels": meta.labels,
                                            "annotations": meta.annotations},
                               "spec": {"taints": taints or None}}
        )
    if (created.get("status") or {}).get("capacity") != body["status"]["capacity"] or (
        created.get("status") or {}
    ).get("conditions") != body["status"]["conditions"]:
        created = client.merge_patch(NODES.item(name, sub="status"), {"status": body["status"]})
    return created
