"""What a tenant sees of the host: its share of the GPU nodes, its queues, its priority
classes. Pure: host objects in, tenant objects out."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable

from gpushare.api.contracts import GPU_RESOURCE as GPU
from gpushare.api.contracts import (
    HOSTNAME_LABEL,
    NODE_ENFORCEMENT_ANNOTATION,
    NODE_GPUS_DECLARED_ANNOTATION,
)
from gpushare.api.gpu import bound_gpus, gpu_request
from gpushare.api.objects import Meta, Obj, complete_node_info
from gpushare.api.quantity import format_milli, to_milli
from gpushare.tenancy import names

SHARE_ANNOTATION = f"{names.GROUP}/gpu-share"
USED_ANNOTATION = f"{names.GROUP}/gpu-allocated"
NODE_GPUS_ANNOTATION = f"{names.GROUP}/node-gpus"
PARENT_ANNOTATION = f"{names.GROUP}/parent-queue"
_NODE_LABELS = (HOSTNAME_LABEL, "kubernetes.io/os", "kubernetes.io/arch",
                "nvidia.com/gpu.product", "nvidia.com/gpu.memory", "nvidia.com/gpu.count")
_NODE_ANNOTATIONS = (NODE_ENFORCEMENT_ANNOTATION, NODE_GPUS_DECLARED_ANNOTATION)


def pod_gpu_milli(pod: Obj) -> int:
    """GPUs (in thousandths) a bound, unfinished pod holds; 0 for any other pod."""
    spec = pod.get("spec") or {}
    if not spec.get("nodeName") or (pod.get("status") or {}).get("phase") in ("Succeeded",
                                                                              "Failed"):
        return 0
    try:
        indices, portion = bound_gpus(pod)
        if indices and not portion:
            portion = 1000
        if indices:
            return len(indices) * portion
        request = gpu_request(pod)
    except Exception:  # an unreadable GPU annotation holds nothing
        return 0
    if request.whole:
        return request.whole * 1000
    return request.devices * request.portion if request.portion else 0


def node_gpu_milli(node: Obj) -> int:
    status = node.get("status") or {}
    value = (status.get("allocatable") or {}).get(GPU) or (status.get("capacity") or {}).get(GPU)
    try:
        return to_milli(str(value)) if value is not None else 0
    except (ValueError, ArithmeticError):
        return 0


def _ready(node: Obj) -> bool:
    for c in (node.get("status") or {}).get("conditions") or ():
        if isinstance(c, dict) and c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


def _queue_milli(queue: Obj, where: str, key: str) -> int:
    if where == "spec":
        value = (((queue.get("spec") or {}).get("resources") or {}).get("gpu") or {}).get(key)
        try:
            return max(int(float(value) * 1000), 0) if value is not None else 0
        except (TypeError, ValueError):
            return 0
    value = ((queue.get("status") or {}).get(key) or {}).get(GPU)
    try:
        return to_milli(str(value)) if value is not None else 0
    except (ValueError, ArithmeticError):
        return 0


def headroom_milli(queues: Iterable[Obj]) -> int:
    """GPUs the tenant's queues may still take: what they deserve (fair share, at least
    the quota) less what they hold."""
    total = 0
    for q in queues:
        deserved = max(_queue_milli(q, "status", "fairShare"), _queue_milli(q, "spec", "quota"))
        total += max(deserved - _queue_milli(q, "status", "allocated"), 0)
    return total


class HostUsage:
    """GPUs held per node, in total and per host namespace, kept up to date from the host
    pod watch (one pass per pod change instead of one per tenant and change)."""

    def __init__(self) -> None:
        self._pods: dict[str, tuple[str, str, int]] = {}  # key -> (namespace, node, milli)
        self._nodes: dict[str, int] = {}
        self._by_ns: dict[str, dict[str, int]] = {}
        self._lock = threading.Lock()

    def update(self, kind: str, pod: Obj) -> bool:
        """Apply one watch event; whether the usage changed."""
        m = Meta.of(pod)
        key = f"{m.namespace}/{m.name}"
        node = (pod.get("spec") or {}).get("nodeName") or ""
        entry = (m.namespace, node, pod_gpu_milli(pod)) if kind != "DELETED" and node \
            else None
        with self._lock:
            old = self._pods.get(key)
            if old == entry:
                return False
            for sign, e in ((-1, old), (1, entry)):
                if e is None:
                    continue
                ns, n, milli = e
                self._nodes[n] = self._nodes.get(n, 0) + sign * milli
                per = self._by_ns.setdefault(ns, {})
                per[n] = per.get(n, 0) + sign * milli
                if not per[n]:
                    del per[n]
            if entry is None:
                self._pods.pop(key, None)
            else:
                self._pods[key] = entry
        return old is None or entry is None or old[2] != entry[2] or old[1] != entry[1]

    def nodes(self) -> dict[str, int]:
        with self._lock:
            return dict(self._nodes)

    def namespace(self, ns: str) -> dict[str, int]:
        with self._lock:
            return dict(self._by_ns.get(ns) or {})


def tenant_nodes(host_nodes: Iterable[Obj], used_all: dict[str, int],
                 used_own: dict[str, int], queues: list[Obj]) -> dict[str, Obj]:
    """The tenant's Node objects: each node its pods run on or may run on (Ready,
    schedulable, with GPUs), with its share of the node's GPUs as allocatable GPU.
    ``used_all``: GPUs (thousandths) held per node; ``used_own``: by the tenant's pods."""
    room = headroom_milli(queues)
    out: dict[str, Obj] = {}
    for node in host_nodes:
        name = Meta.of(node).name
        gpus = node_gpu_milli(node)
        usable = gpus > 0 and _ready(node) and not (node.get("spec") or {}).get("unschedulable")
        if not usable and name not in used_own:
            continue
        own = used_own.get(name, 0)
        free = max(gpus - used_all.get(name, 0), 0) if usable else 0
        share = own + min(free, room)
        out[name] = _tenant_node(node, share, own, gpus)
    return out


def _tenant_node(node: Obj, share: int, own: int, gpus: int) -> Obj:
    meta = Meta.of(node)
    labels = {k: v for k, v in meta.labels.items() if k in _NODE_LABELS}
    labels[names.VIEW_LABEL] = "true"
    annotations = {k: v for k, v in meta.annotations.items()
                   if k in _NODE_ANNOTATIONS}
    annotations[SHARE_ANNOTATION] = format_milli(share)
    annotations[USED_ANNOTATION] = format_milli(own)
    annotations[NODE_GPUS_ANNOTATION] = format_milli(gpus)
    status = node.get("status") or {}
    resources = {k: v for k, v in (status.get("allocatable") or {}).items()
                 if k in ("cpu", "memory", "pods")}
    resources[GPU] = format_milli(share)
    conditions = [c for c in status.get("conditions") or ()
                  if isinstance(c, dict) and c.get("type") == "Ready"]
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": meta.name, "labels": labels, "annotations": annotations},
        "spec": {"unschedulable": True} if (node.get("spec") or {}).get("unschedulable") else {},
        "status": {"capacity": dict(resources), "allocatable": dict(resources),
                   "conditions": conditions, "nodeInfo": complete_node_info(status.get("nodeInfo")),
                   "addresses": [{"type": "Hostname", "address": meta.name}]},
    }


def tenant_queue(queue: Obj) -> Obj:
    """The read-only copy of a host queue inside the tenant (without its parent, which
    the tenant does not have; named in an annotation)."""
    spec = dict(queue.get("spec") or {})
    parent = spec.pop("parentQueue", None)
    annotations = {PARENT_ANNOTATION: str(parent)} if parent else {}
    status = {k: v for k, v in (queue.get("status") or {}).items() if k != "childQueues"}
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
            "metadata": {"name": Meta.of(queue).name, "labels": {names.VIEW_LABEL: "true"},
                         "annotations": annotations},
            "spec": spec, "status": status}


#: The highest value a user's PriorityClass may have; above it (and under the reserved
#: ``system-`` prefix) are Kubernetes' own classes, which kube-apiserver makes itself.
HIGHEST_USER_PRIORITY = 1_000_000_000


def is_system_priority_class(pc: Obj) -> bool:
    """``system-cluster-critical``, ``system-node-critical``: every real cluster has them,
    no tenant may use them, and the tenant's API server refuses to store them."""
    value = pc.get("value")
    return Meta.of(pc).name.startswith("system-") or (
        isinstance(value, int) and value > HIGHEST_USER_PRIORITY)


def tenant_priority_classes(host_classes: Iterable[Obj], allowed: Iterable[str] | None
                            ) -> dict[str, Obj]:
    """The tenant's PriorityClass views: the host's classes it may use (all of them when
    ``allowed`` is None), never the system ones."""
    names_allowed = None if allowed is None else set(allowed)
    return {Meta.of(pc).name: tenant_priority_class(pc) for pc in host_classes
            if not is_system_priority_class(pc)
            and (names_allowed is None or Meta.of(pc).name in names_allowed)}


def tenant_priority_class(pc: Obj) -> Obj:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": Meta.of(pc).name, "labels": {names.VIEW_LABEL: "true"}},
            "value": pc.get("value", 0), "description": pc.get("description", ""),
            "preemptionPolicy": pc.get("preemptionPolicy", "PreemptLowerPriority"),
            "globalDefault": False}


def differs(current: Obj, want: Obj, keys: tuple[str, ...]) -> bool:
    cm, wm = Meta.of(current), Meta.of(want)
    if cm.labels != wm.labels or cm.annotations != wm.annotations:
        return True
    return any(json.dumps(current.get(k), sort_keys=True) != json.dumps(want.get(k),
                                                                       sort_keys=True)
               for k in keys)
