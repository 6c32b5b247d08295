"""Pod-specific transitions: binding to a node."""

from __future__ import annotations

from typing import Any

from gpushare.apiserver.errors import Cause, bad_request, conflict, invalid


def bound(pod: dict[str, Any], binding: Any, now: str) -> dict[str, Any]:
    """The pod after a v1 Binding: on its node, with the Binding's annotations.

    The scheduler records its choice of GPU slots as annotations of the Binding; they are
    copied onto the pod in the same write as `spec.nodeName`.
    """
    name = pod["metadata"]["name"]
    if not isinstance(binding, dict):
        raise bad_request("the request body must be a Binding")
    node = (binding.get("target") or {}).get("name")
    if not node:
        raise invalid("", "Binding", name, [Cause("target.name", "Required value",
                                                  "FieldValueRequired")])
    bmeta = binding.get("metadata") or {}
    if bmeta.get("uid") and bmeta["uid"] != pod["metadata"].get("uid"):
        raise conflict("", "pods", name, "the pod UID in the binding does not match")
    if pod["metadata"].get("deletionTimestamp"):
        raise conflict("", "pods", name, "pod is being deleted, cannot be assigned to a host")
    current = (pod.get("spec") or {}).get("nodeName")
    if current:
        raise conflict("", "pods", name, f'pod {name} is already assigned to node "{current}"')
    # A copy of what changes (metadata, spec, status and their annotations and conditions);
    # the rest is shared with the stored pod, which is never changed in place.
    obj = dict(pod)
    obj["metadata"] = dict(pod["metadata"])
    obj["spec"] = dict(pod.get("spec") or {})
    obj["spec"]["nodeName"] = node
    annotations = bmeta.get("annotations") or {}
    if annotations:
        obj["metadata"]["annotations"] = {**(obj["metadata"].get("annotations") or {}),
                                          **annotations}
    status = obj["status"] = dict(pod.get("status") or {})
    conditions = [c for c in status.get("conditions") or () if c.get("type") != "PodScheduled"]
    conditions.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                       "lastTransitionTime": now})
    status["conditions"] = conditions
    return obj
