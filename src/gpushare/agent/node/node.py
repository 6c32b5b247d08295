"""The Node object this agent registers and keeps alive. Building it is pure."""

from __future__ import annotations

import platform
from typing import Any

from gpushare.agent.node.inventory import GpuInventory, HostResources
from gpushare.api.contracts import (
    GPU_RESOURCE,
    GPU_USAGE_ANNOTATION,
    HOSTNAME_LABEL,
    NODE_ENFORCEMENT_ANNOTATION,
    NODE_GPUS_ANNOTATION,
    NODE_GPUS_DECLARED_ANNOTATION,
)
from gpushare.api.timefmt import rfc3339

ANN_GPUS = NODE_GPUS_ANNOTATION
ANN_DECLARED = NODE_GPUS_DECLARED_ANNOTATION
ANN_ENFORCEMENT = NODE_ENFORCEMENT_ANNOTATION
ANN_GPU_USAGE = GPU_USAGE_ANNOTATION
ANN_AGENT_VERSION = "gpushare.io/agent-version"
ANN_SANDBOX = "gpushare.io/sandbox"  # the pods' isolation: bwrap, setuid or none
SANDBOX_CONDITION = "PodSandbox"
_SANDBOX_REASONS = {"bwrap": "Bubblewrap", "setuid": "PerPodUser", "none": "NoIsolation"}


def node_labels(name: str, inventory: GpuInventory) -> dict[str, str]:
    labels = {
        HOSTNAME_LABEL: name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": _arch(),
        "nvidia.com/gpu.count": str(inventory.count),
    }
    if inventory.devices:
        labels["nvidia.com/gpu.product"] = inventory.devices[0].product
        labels["nvidia.com/gpu.memory"] = str(min(d.memory_mib for d in inventory.devices))
    return labels


def _arch() -> str:
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def resources(inventory: GpuInventory, host: HostResources) -> dict[str, str]:
    return {
        "cpu": str(host.cpu_cores),
        "memory": f"{host.memory_bytes // 1024}Ki",
        "pods": "110",
        GPU_RESOURCE: str(inventory.count),
    }


def ready_condition(now: float, since: float, ready: bool = True) -> dict[str, Any]:
    return {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": "KubeletReady" if ready else "KubeletNotReady",
        "message": "gpushare agent is posting ready status",
        "lastHeartbeatTime": rfc3339(now),
        "lastTransitionTime": rfc3339(since),
    }


def sandbox_condition(mode: str, message: str, now: float, since: float) -> dict[str, Any]:
    """The Node condition that says which isolation pods get (`kubectl describe node`)."""
    return {
        "type": SANDBOX_CONDITION,
        "status": "False" if mode == "none" else "True",
        "reason": _SANDBOX_REASONS.get(mode, "Unknown"),
        "message": message,
        "lastHeartbeatTime": rfc3339(now),
        "lastTransitionTime": rfc3339(since),
    }


def node_status(
    inventory: GpuInventory,
    host: HostResources,
    address: str,
    hostname: str,
    port: int,
    now: float,
    ready_since: float,
    version: str,
    sandbox: tuple[str, str] | None = None,
) -> dict[str, Any]:
    capacity = resources(inventory, host)
    conditions = [ready_condition(now, ready_since)]
    if sandbox is not None:
        conditions.append(sandbox_condition(*sandbox, now, ready_since))
    return {
        "capacity": capacity,
        "allocatable": dict(capacity),
        "conditions": conditions,
        "addresses": [
            {"type": "InternalIP", "address": address},
            {"type": "Hostname", "address": hostname},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
        "nodeInfo": {
            "architecture": _arch(),
            "operatingSystem": "linux",
            "kernelVersion": platform.release(),
            "osImage": platform.platform(),
            "containerRuntimeVersion": "gpushare-process://" + version,
            "kubeletVersion": f"v1.32.0-gpushare-{version}",
            "kubeProxyVersion": "",
            "machineID": "",
            "systemUUID": "",
            "bootID": "",
        },
    }


def node_object(
    name: str,
    inventory: GpuInventory,
    host: HostResources,
    enforcement: str,
    address: str,
    port: int,
    now: float,
    version: str,
    sandbox: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """The Node; `sandbox` is (mode, description) of the pods' isolation."""
    annotations = {
        ANN_GPUS: inventory.to_json(),
        ANN_ENFORCEMENT: enforcement,
        ANN_AGENT_VERSION: version,
    }
    if inventory.declared:
        annotations[ANN_DECLARED] = "true"
    if sandbox is not None:
        annotations[ANN_SANDBOX] = sandbox[0]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": node_labels(name, inventory),
            "annotations": annotations,
        },
        "spec": {},
        "status": node_status(inventory, host, address, name, port, now, now, version,
                              sandbox),
    }
