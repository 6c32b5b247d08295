"""The Queue and PodGroup CustomResourceDefinitions (KAI Scheduler's `scheduling.run.ai`
kinds) as this version ships them: the API server preinstalls them in every logical
cluster, the tenancy controller installs them in each tenant's, `gpushare install` writes
them out. Pure data.
"""

from __future__ import annotations

from typing import Any


def _resource_limits(what: str, unit: str) -> dict[str, Any]:
    return {
        "type": "object",
        "description": f"{what} entitlement of the queue, in {unit}.",
        "properties": {
            "quota": {"type": "number", "description": f"Guaranteed {what} ({unit}); -1 means "
                                                       "unlimited."},
            "limit": {"type": "number", "description": f"Hard cap on {what} ({unit}) the queue "
                                                       "and its children may use; -1 means no "
                                                       "limit."},
            "overQuotaWeight": {"type": "number", "description": "Share of the unused "
                                                                 "resources above quota, "
                                                                 "relative to sibling queues."},
            "lendingLimit": {"type": "number", "minimum": 0,
                             "description": f"At most this much of the queue's unused {what} "
                                            f"quota ({unit}) may be used by queues outside "
                                            "its subtree; the rest stays idle for it. At "
                                            "most the quota, which must be finite; unset: "
                                            "all of it may be lent."},
        },
    }


def _gpu_limits() -> dict[str, Any]:
    """``gpu``: as every resource, plus its figures per GPU type."""
    block = _resource_limits("GPU", "GPUs; fractions allowed")
    entry = {k: v for k, v in block["properties"].items() if k != "lendingLimit"}
    block["properties"]["types"] = {
        "type": "object",
        "description": "Quota, limit and over-quota weight per GPU type, keyed by the type "
                       "(H100, L40S, ... or the node label nvidia.com/gpu.product's value): "
                       "each type's GPUs are divided on their own, a job is charged on the "
                       "type of the node it runs on, and the figures above still bound the "
                       "total. Not available under compat: kai.",
        "additionalProperties": {"type": "object", "properties": entry},
    }
    return block


_RESOURCE_LIST = {
    "type": "object",
    "description": "Quantities by resource name (nvidia.com/gpu, cpu, memory).",
    "additionalProperties": {"x-kubernetes-int-or-string": True},
}


_MAX_RUNTIME = {
    "type": "object",
    "description": "Longest a job of this queue may run, counted from when its gang was "
                   "placed; a job past it is evicted, then requeued or failed.",
    "properties": {
        "seconds": {"type": "integer", "minimum": 1,
                    "description": "Maximum runtime in seconds (a job's own "
                                   "gpushare.io/expected-runtime applies when shorter; "
                                   "unset: only that)."},
        "policy": {"type": "string", "enum": ["requeue", "fail"],
                   "description": "requeue (default): evicted, and not placed again before "
                                  "requeueDelaySeconds; fail: evicted, the PodGroup Failed."},
        "requeueDelaySeconds": {"type": "integer", "minimum": 0,
                                "description": "Seconds a requeued job waits before it may "
                                               "be placed again (default 60)."},
    },
}


def queue_crd() -> dict[str, Any]:
    spec_schema = {
        "type": "object",
        "description": "Entitlements and position of the queue in the queue tree.",
        "required": ["resources"],
        "properties": {
            "displayName": {"type": "string", "description": "Human-readable name."},
            "parentQueue": {"type": "string", "description": "Name of the parent queue; only "
                                                             "leaf queues hold workloads."},
            "priority": {"type": "integer", "description": "Over-quota priority: queues of a "
                                                           "higher priority get unused "
                                                           "resources first (default 100)."},
            "preemptMinRuntime": {"type": "string", "description": "Minimum runtime before a "
                                                                   "workload of this queue may "
                                                                   "be preempted, e.g. 10m."},
            "reclaimMinRuntime": {"type": "string", "description": "Minimum runtime before a "
                                                                   "workload of this queue may "
                                                                   "be reclaimed."},
            "reservationAfter": {"type": "string", "description": "How long a gang of this "
                                                                  "queue waits unplaced before "
                                                                  "the nodes it needs are "
                                                                  "reserved for it, e.g. 30m; "
                                                                  "a negative duration never "
                                                                  "reserves (default: the "
                                                                  "scheduler config's)."},
            "maxRuntime": _MAX_RUNTIME,
            "resources": {
                "type": "object",
                "description": "Quota, limit, over-quota weight and lending limit per "
                               "resource.",
                "properties": {
                    "gpu": _gpu_limits(),
                    "cpu": _resource_limits("CPU", "millicores"),
                    "memory": _resource_limits("memory", "megabytes"),
                },
            },
        },
    }
    status_schema = {
        "type": "object",
        "description": "Usage and fair share, written by the queue status controller.",
        "properties": {
            "allocated": _RESOURCE_LIST,
            "allocatedNonPreemptible": _RESOURCE_LIST,
            "requested": _RESOURCE_LIST,
            "fairShare": _RESOURCE_LIST,
            "childQueues": {"type": "array", "items": {"type": "string"}},
            "conditions": {"type": "array", "items": {"type": "object",
                                                      "x-kubernetes-preserve-unknown-fields":
                                                          True}},
        },
        "x-kubernetes-preserve-unknown-fields": True,
    }
    return _crd(
        "queues", "Queue", "queue", ("q",), "scheduling.run.ai", "v2", "Cluster",
        "A fair-share queue: guaranteed quota, over-quota weight and limit per resource.",
        spec_schema, status_schema,
        [
            {"name": "Priority", "type": "integer", "jsonPath": ".spec.priority"},
            {"name": "Parent", "type": "string", "jsonPath": ".spec.parentQueue"},
            {"name": "GPU Quota", "type": "number", "jsonPath": ".spec.resources.gpu.quota"},
            {"name": "GPU FairShare", "type": "string",
             "jsonPath": ".status.fairShare.nvidia\\.com/gpu"},
            {"name": "GPU Allocated", "type": "string",
             "jsonPath": ".status.allocated.nvidia\\.com/gpu"},
            {"name": "GPU Requested", "type": "string", "priority": 1,
             "jsonPath": ".status.requested.nvidia\\.com/gpu"},
            {"name": "Children", "type": "string", "priority": 1,
             "jsonPath": ".status.childQueues"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
    )


def podgroup_crd() -> dict[str, Any]:
    spec_schema = {
        "type": "object",
        "description": "A gang of pods scheduled all or nothing.",
        "properties": {
            "minMember": {"type": "integer", "minimum": 0, "description": "Number of pods "
                                                                          "that must be "
                                                                          "scheduled together "
                                                                          "(0: elastic)."},
            "minSubGroup": {"type": "integer", "minimum": 0},
            "queue": {"type": "string", "description": "Leaf queue of the workload."},
            "priorityClassName": {"type": "string"},
            "preemptibility": {"type": "string", "enum": [
                "preemptible", "non-preemptible", "semi-preemptible", ""]},
            "markUnschedulable": {"type": "boolean"},
            "schedulingBackoff": {"type": "integer"},
            "preemptionDelay": {"type": "string"},
            "stalenessGracePeriod": {"type": "string"},
            "topologyConstraint": {"type": "object",
                                   "x-kubernetes-preserve-unknown-fields": True},
            "subGroups": {"type": "array", "items": {
                "type": "object",
                "required": ["name"],
                "properties": {
                    "name": {"type": "string"},
                    "parent": {"type": "string"},
                    "minMember": {"type": "integer", "minimum": 0},
                    "minSubGroup": {"type": "integer", "minimum": 0},
                    "topologyConstraint": {"type": "object",
                                           "x-kubernetes-preserve-unknown-fields": True},
                },
            }},
        },
    }
    status_schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return _crd(
        "podgroups", "PodGroup", "podgroup", ("pg",), "scheduling.run.ai", "v2alpha2",
        "Namespaced", "A gang of pods with its queue and priority.", spec_schema, status_schema,
        [
            {"name": "MinMember", "type": "integer", "jsonPath": ".spec.minMember"},
            {"name": "Queue", "type": "string", "jsonPath": ".spec.queue"},
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "Priority", "type": "string", "priority": 1,
             "jsonPath": ".spec.priorityClassName"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
    )


def _crd(
    plural: str,
    kind: str,
    singular: str,
    short: tuple[str, ...],
    group: str,
    version: str,
    scope: str,
    description: str,
    spec_schema: dict[str, Any],
    status_schema: dict[str, Any],
    columns: list[dict[str, Any]],
) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {"plural": plural, "singular": singular, "kind": kind,
                      "listKind": kind + "List", "shortNames": list(short)},
            "scope": scope,
            "versions": [{
                "name": version,
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": columns,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": description,
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
