"""A VirtualCluster's spec as a policy, its validation, and the CRD that serves it.

```yaml
apiVersion: tenancy.gpushare.io/v1alpha1
kind: VirtualCluster
metadata: {name: nlp}
spec:
  queues: [nlp]                      # the queue(s) its pods may use; the first is the default
  priorityClasses: [train, inference]  # optional: allowed classes (default: the host's)
  maxPods: 50                        # optional: live pods at most
  paused: false                      # true: its pods are taken off the host
```
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpushare.api.contracts import DEFAULT_QUEUE
from gpushare.api.shapes import Cause
from gpushare.tenancy import names

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

    @property
    def default_queue(self) -> str:
        return self.queues[0]

    @classmethod
    def from_object(cls, vc: dict[str, Any]) -> TenantPolicy:
        """The policy of a stored (validated) VirtualCluster; tolerant of odd values."""
        meta = vc.get("metadata") or {}
        spec = _dict(vc.get("spec"))
        raw_queues = spec.get("queues")
        queues = tuple(q for q in raw_queues if isinstance(q, str)) if isinstance(
            raw_queues, list) else ()
        classes = spec.get("priorityClasses")
        max_pods = spec.get("maxPods")
        return cls(
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            queues=queues or (DEFAULT_QUEUE,),
            priority_classes=(tuple(str(c) for c in classes if isinstance(c, str))
                              if isinstance(classes, list) and classes else None),
            max_pods=max_pods if isinstance(max_pods, int) and not isinstance(max_pods, bool)
            else None,
            paused=spec.get("paused") is True,
            deleting=bool(meta.get("deletionTimestamp")),
        )


def validate_virtual_cluster(vc: dict[str, Any]) -> list[Cause]:
    """Field causes for a VirtualCluster that cannot be served (422 before storage)."""
    causes: list[Cause] = []
    name = str((vc.get("metadata") or {}).get("name", ""))
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
    paused = spec.get("paused")
    if paused is not None and not isinstance(paused, bool):
        causes.append(Cause("spec.paused", f"Invalid value: {paused!r}: must be true or false"))
    return causes


def virtualcluster_crd() -> dict[str, Any]:
    """The CRD of VirtualCluster, installed on the host cluster."""
    names_ = {"plural": names.PLURAL, "singular": "virtualcluster", "kind": names.KIND,
              "listKind": names.KIND + "List", "shortNames": ["vc", "vcluster"],
              "categories": ["gpushare"]}
    spec_schema = {
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
        },
    }
    status_schema = {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "properties": {
            "phase": {"type": "string"},
            "endpoint": {"type": "string"},
            "hostNamespace": {"type": "string"},
            "pods": {"type": "integer"},
            "gpuAllocated": {"type": "string"},
            "message": {"type": "string"},
            "observedGeneration": {"type": "integer"},
            "conditions": {"type": "array", "items": {
                "type": "object", "x-kubernetes-preserve-unknown-fields": True}},
        },
    }
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
                    {"name": "Max Pods", "type": "integer", "priority": 1,
                     "jsonPath": ".spec.maxPods"},
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
                        "spec": spec_schema,
                        "status": status_schema,
                    },
                }},
            }],
        },
    }


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
