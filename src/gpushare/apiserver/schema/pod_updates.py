"""What an update may change in a pod's spec, as Kubernetes' pod update validation.

A pod's spec is fixed once created, except: the images of its containers and init
containers, `activeDeadlineSeconds` (set when unset, or lowered, never removed),
tolerations (additions only: the existing ones stay), `terminationGracePeriodSeconds` of a
pod being deleted (or raised from a negative value to 1), and scheduling gates (removals
only). `spec.nodeName` is set only through the `binding` subresource. Anything else (the
node, volumes, commands, the service account, security context ...) answers 422, so that
nothing checked at creation (admission, tenancy policy, the binder's choice) is bypassed by
a later write. Pure: returns field causes.
"""

from __future__ import annotations

import copy
from typing import Any

from gpushare.api.shapes import Cause

MESSAGE = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
    "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
    "(allow it to be set to 1 if it was previously negative)"
)


def _carry_images(old_spec: dict[str, Any], spec: dict[str, Any], key: str) -> None:
    """Copy the new images onto the old containers (same count, same names)."""
    old_list, new_list = old_spec.get(key), spec.get(key)
    if not isinstance(old_list, list) or not isinstance(new_list, list):
        return
    if len(old_list) != len(new_list):
        return
    for old_c, new_c in zip(old_list, new_list, strict=True):
        if isinstance(old_c, dict) and isinstance(new_c, dict) and \
                old_c.get("name") == new_c.get("name") and "image" in new_c:
            old_c["image"] = new_c["image"]


def _deadline_ok(old: Any, new: Any) -> bool:
    if new == old:
        return True
    if not isinstance(new, int) or isinstance(new, bool) or new <= 0:
        return False
    return old is None or (isinstance(old, int) and new <= old)


def _tolerations_ok(old: Any, new: Any) -> bool:
    """Every existing toleration kept (its tolerationSeconds may change); others added."""
    old_list = old if isinstance(old, list) else []
    if new is not None and not isinstance(new, list):
        return False
    rest = [t for t in new or [] if isinstance(t, dict)]

    def key(t: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(t.get(k) for k in ("key", "operator", "value", "effect"))
    for t in old_list:
        if not isinstance(t, dict):
            continue
        found = next((n for n in rest if key(n) == key(t)), None)
        if found is None:
            return False
        rest.remove(found)
    return True


def _gates_ok(old: Any, new: Any) -> bool:
    """Scheduling gates may only be removed."""
    old_names = [g.get("name") for g in old or [] if isinstance(g, dict)]
    if new is not None and not isinstance(new, list):
        return False
    return all(isinstance(g, dict) and g.get("name") in old_names for g in new or [])


def _grace_ok(old_pod: dict[str, Any], old: Any, new: Any) -> bool:
    if new == old:
        return True
    if isinstance(old, int) and old < 0 and new == 1:
        return True
    deleting = bool((old_pod.get("metadata") or {}).get("deletionTimestamp"))
    return deleting and isinstance(new, int) and not isinstance(new, bool) and new >= 0


def update_causes(old_pod: dict[str, Any], new_pod: dict[str, Any]) -> list[Cause]:
    """Why an update of `old_pod` to `new_pod` changes what a pod update may not."""
    old_spec, spec = old_pod.get("spec"), new_pod.get("spec")
    if not isinstance(old_spec, dict) or not isinstance(spec, dict) or spec == old_spec:
        return []
    allowed = copy.deepcopy(old_spec)
    _carry_images(allowed, spec, "containers")
    _carry_images(allowed, spec, "initContainers")
    checks = (("activeDeadlineSeconds", _deadline_ok(old_spec.get("activeDeadlineSeconds"),
                                                     spec.get("activeDeadlineSeconds"))),
              ("tolerations", _tolerations_ok(old_spec.get("tolerations"),
                                              spec.get("tolerations"))),
              ("schedulingGates", _gates_ok(old_spec.get("schedulingGates"),
                                            spec.get("schedulingGates"))),
              ("terminationGracePeriodSeconds", _grace_ok(
                  old_pod, old_spec.get("terminationGracePeriodSeconds"),
                  spec.get("terminationGracePeriodSeconds"))))
    for field, ok in checks:
        if ok:
            if field in spec:
                allowed[field] = copy.deepcopy(spec[field])
            else:
                allowed.pop(field, None)
    if allowed == spec:
        return []
    changed = sorted(k for k in set(allowed) | set(spec) if allowed.get(k) != spec.get(k))
    return [Cause("spec", f"Forbidden: {MESSAGE}; changed: "
                          f"{', '.join(f'spec.{k}' for k in changed)}", "FieldValueForbidden")]
