"""A VirtualCluster's spec as a policy, its validation, and the CRD that serves it.

```yaml
apiVersion: tenancy.gpushare.io/v1alpha1
kind: VirtualCluster
metadata: {name: nlp}
spec:
  queues: [nlp]                      # the queue(s) its pods may use; the first is the default
  priorityClasses: [train, inference]  # optional: allowed classes (default: the host's)
  maxPods: 50                        # optional: live pods at most (terminating ones count)
  podCreateRate: 5                   # optional: pods created per second at most (429 past it)
  podCreateBurst: 20                 # optional: creates allowed at once (default: the rate)
  maxObjects: 10000                  # optional: objects its cluster may hold (default 10000)
  maxStorageBytes: 256Mi             # optional: bytes of those objects (default 256Mi)
  paused: false                      # true: its pods are taken off the host
```
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpushare.api.contracts import DEFAULT_QUEUE
from gpushare.api.objects import Meta
from gpushare.api.quantity import QuantityError, parse_quantity
from gpushare.api.shapes import Cause
from gpushare.tenancy import names

#: a tenant's API quota when its VirtualCluster sets none (the API server enforces it)
DEFAULT_MAX_OBJECTS = 10_000
DEFAULT_MAX_STORAGE_BYTES = 256 * 1024**2

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclass(frozen=True, slots=True)
class TenantPolicy:
    name: str
    uid: str
    queues: tuple[str, ...]
    priority_classes: tuple[str, ...] | None  # None: any class the host has
    max_pods: int | None
    paused: bool
    deleting: bool
    pod_create_rate: float | None = None  # pods per second
    pod_create_burst: int = 1
    max_objects: int = DEFAULT_MAX_OBJECTS
    max_storage_bytes: int = DEFAULT_MAX_STORAGE_BYTES

    @property
    def default_queue(self) -> str:
        return self.queues[0]

    @classmethod
    def from_object(cls, vc: dict[str, Any]) -> TenantPolicy:
        """The policy of a stored (validated) VirtualCluster; tolerant of odd values."""
        meta = Meta.of(vc)
        spec = _dict(vc.get("spec"))
        raw_queues = spec.get("queues")
        queues = tuple(q for q in raw_queues if isinstance(q, str)) if isinstance(
            raw_queues, list) else ()
        classes = spec.get("priorityClasses")
        max_pods = spec.get("maxPods")
        rate, burst = spec.get("podCreateRate"), spec.get("podCreateBurst")
        create_rate = float(rate) if isinstance(rate, int | float) and _positive(rate) else None
        return cls(
            name=meta.name,
            uid=meta.uid,
            queues=queues or (DEFAULT_QUEUE,),
            priority_classes=(tuple(str(c) for c in classes if isinstance(c, str))
                              if isinstance(classes, list) and classes else None),
            max_pods=max_pods if isinstance(max_pods, int) and not isinstance(max_pods, bool)
            else None,
            paused=spec.get("paused") is True,
            deleting=meta.deleting,
            pod_create_rate=create_rate,
            pod_create_burst=burst if isinstance(burst, int) and _positive(burst)
            else max(1, int(create_rate or 1)),
            max_objects=_count(spec.get("maxObjects"), DEFAULT_MAX_OBJECTS),
            max_storage_bytes=_bytes(spec.get("maxStorageBytes"), DEFAULT_MAX_STORAGE_BYTES),
        )


def _positive(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0 \
        and value == value and value != float("inf")


def validate_virtual_cluster(vc: dict[str, Any]) -> list[Cause]:
    """Field causes for a VirtualCluster that cannot be served (422 before storage)."""
    causes: list[Cause] = []
    name = Meta.of(vc).name
    if not _DNS_LABEL.match(name) or len(name) > names.MAX_TENANT_NAME:
        causes.append(Cause("metadata.name", f"Invalid value: {name!r}: a virtual cluster name "
                            "must be a DNS label (lower-case letters, digits, '-') of at most "
                            f"{names.MAX_TENANT_NAME} characters"))
    elif name == names.HOST_CLUSTER:
        causes.append(Cause("metadata.name", f"Invalid value: {name!r}: the host cluster's "
                            "name is reserved"))
    spec = vc.get("spec")
    if not isinstance(spec, dict):
        return [*causes, Cause("spec", "Required value", "FieldValueRequired")]
    queues = spec.get("queues")
    if not isinstance(queues, list) or not queues:
        causes.append(Cause("spec.queues", "Required value: at least one queue",
                            "FieldValueRequired"))
    else:
        for i, q in enumerate(queues):
            if not isinstance(q, str) or not _DNS_SUBDOMAIN.match(q):
                causes.append(Cause(f"spec.queues[{i}]", f"Invalid value: {q!r}: must be a "
                                    "queue name"))
        if len(set(map(str, queues))) != len(queues):
            causes.append(Cause("spec.queues", "Duplicate value: a queue is listed twice",
                                "FieldValueDuplicate"))
    classes = spec.get("priorityClasses")
    if classes is not None:
        if not isinstance(classes, list):
            causes.append(Cause("spec.priorityClasses", "Invalid value: must be a list of "
                                "PriorityClass names"))
        else:
            for i, c in enumerate(classes):
                if not isinstance(c, str) or not _DNS_SUBDOMAIN.match(c):
                    causes.append(Cause(f"spec.priorityClasses[{i}]",
                                        f"Invalid value: {c!r}: must be a PriorityClass name"))
    max_pods = spec.get("maxPods")
    if max_pods is not None and (not isinstance(max_pods, int) or isinstance(max_pods, bool)
                                 or max_pods < 0):
        causes.append(Cause("spec.maxPods", f"Invalid value: {max_pods!r}: must be an integer "
                            ">= 0"))
    for key in ("podCreateRate", "podCreateBurst"):
        value = spec.get(key)
        if value is not None and not (_positive(value) and (
                key == "podCreateRate" or isinstance(value, int))):
            kind = "a number" if key == "podCreateRate" else "an integer"
            causes.append(Cause(f"spec.{key}", f"Invalid value: {value!r}: must be {kind} > 0"))
    max_objects = spec.get("maxObjects")
    if max_objects is not None and _count(max_objects, -1) < 0:
        causes.append(Cause("spec.maxObjects", f"Invalid value: {max_objects!r}: must be an "
                            "integer >= 0"))
    max_bytes = spec.get("maxStorageBytes")
    if max_bytes is not None and _bytes(max_bytes, -1) < 0:
        causes.append(Cause("spec.maxStorageBytes", f"Invalid value: {max_bytes!r}: must be "
                            "a whole number of bytes >= 0 (an integer or a quantity such as "
                            "512Mi)"))
    paused = spec.get("paused")
    if paused is not None and not isinstance(paused, bool):
        causes.append(Cause("spec.paused", f"Invalid value: {paused!r}: must be true or false"))
    return causes


def _spec_schema() -> dict[str, Any]:
    """The schema of a VirtualCluster's spec: what the platform grants the tenant."""
    return {
        "type": "object",
        "description": "What the tenant may use on the host.",
        "required": ["queues"],
        "properties": {
            "queues": {"type": "array", "items": {"type": "string"},
                       "description": "Queues the tenant's pods may use; the first is the "
                                      "default for pods that name none."},
            "priorityClasses": {"type": "array", "items": {"type": "string"},
                                "description": "Priority classes the tenant may use "
                                               "(default: any of the host's)."},
            "maxPods": {"type": "integer", "minimum": 0,
                        "description": "Live (not finished) pods the tenant may have."},
            "paused": {"type": "boolean", "description": "Take the tenant's pods off the "
                                                         "host; they come back on resume."},
            "podCreateRate": {"type": "number", "description": "Pods the tenant may create "
                                                               "per second (429 past it)."},
            "podCreateBurst": {"type": "integer", "minimum": 1,
                               "description": "Pod creates allowed at once (default: the "
                                              "rate)."},
            "maxObjects": {"type": "integer", "minimum": 0,
                           "description": "Objects the tenant's cluster may hold (default "
                                          f"{DEFAULT_MAX_OBJECTS}); enforced by the API "
                                          "server."},
            "maxStorageBytes": {"x-kubernetes-int-or-string": True,
                                "description": "Bytes the tenant's objects may take (an "
                                               "integer or a quantity such as 512Mi; default "
                                               "256Mi); enforced by the API server."},
        },
    }


def _status_schema() -> dict[str, Any]:
    """The schema of a VirtualCluster's status, as the tenancy controller writes it."""
    return {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "properties": {
            "phase": {"type": "string"},
            "endpoint": {"type": "string"},
            "hostNamespace": {"type": "string"},
            "pods": {"type": "integer"},
            "gpuAllocated": {"type": "string"},
            "message": {"type": "string"},
            "logsAndExec": {"type": "string"},
            "observedGeneration": {"type": "integer"},
            "conditions": {"type": "array", "items": {
                "type": "object", "x-kubernetes-preserve-unknown-fields": True}},
        },
    }


def virtualcluster_crd() -> dict[str, Any]:
    """The CRD of VirtualCluster, installed on the host cluster."""
    names_ = {"plural": names.PLURAL, "singular": "virtualcluster", "kind": names.KIND,
              "listKind": names.KIND + "List", "shortNames": ["vc", "vcluster"],
              "categories": ["gpushare"]}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{names.PLURAL}.{names.GROUP}"},
        "spec": {
            "group": names.GROUP,
            "names": names_,
            "scope": "Cluster",
            "versions": [{
                "name": names.VERSION, "served": True, "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Queues", "type": "string", "jsonPath": ".spec.queues"},
                    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                    {"name": "Pods", "type": "integer", "jsonPath": ".status.pods"},
                    {"name": "GPU Allocated", "type": "string",
                     "jsonPath": ".status.gpuAllocated"},
                    # kubectl logs/exec of the tenant's pods: Served (one server),
                    # HostAdminOnly (a tenant plane of its own cannot reach the kubelets)
                    {"name": "Logs/Exec", "type": "string", "jsonPath": ".status.logsAndExec"},
                    {"name": "Max Pods", "type": "integer", "priority": 1,
                     "jsonPath": ".spec.maxPods"},
                    {"name": "Max Objects", "type": "integer", "priority": 1,
                     "jsonPath": ".spec.maxObjects"},
                    {"name": "Max Storage", "type": "string", "priority": 1,
                     "jsonPath": ".spec.maxStorageBytes"},
                    {"name": "Endpoint", "type": "string", "priority": 1,
                     "jsonPath": ".status.endpoint"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": "A virtual cluster: a team's own Kubernetes cluster whose "
                                   "pods run on the host's GPUs under the platform's queues.",
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": _spec_schema(),
                        "status": _status_schema(),
                    },
                }},
            }],
        },
    }


def _count(value: Any, default: int) -> int:
    """A non-negative integer field, or `default` when absent or not one."""
    if value is None or not isinstance(value, int) or isinstance(value, bool) or value < 0:
        return default
    return value


def _bytes(value: Any, default: int) -> int:
    """A byte count given as an integer or a quantity ("512Mi"), or `default`."""
    if value is None or isinstance(value, bool) or not isinstance(value, int | str):
        return default
    try:
        number = parse_quantity(value)
    except QuantityError:
        return default
    if number < 0 or number != number.to_integral_value():
        return default
    return int(number)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
