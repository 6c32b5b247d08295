"""Validation of objects before they are written, beyond their shape (`shapes`): names,
GPU annotations, workloads, queues, pod groups, priority classes. Pure functions returning
field causes."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from gpushare.api import shapes
from gpushare.api.contracts import GPU_DEVICES_ANNOTATION as GPU_NUM_DEVICES
from gpushare.api.contracts import GPU_FRACTION_ANNOTATION as GPU_FRACTION
from gpushare.api.contracts import GPU_MEMORY_ANNOTATION as GPU_MEMORY
from gpushare.api.contracts import GPU_RESOURCE
from gpushare.apiserver.errors import Cause
from gpushare.apiserver.schema import pod_updates
from gpushare.model.queue import gpu_type_error, lending_limit_error

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_DECIMAL = re.compile(r"^(\d+\.?\d*|\.\d+)$")
_POSITIVE_INT = re.compile(r"^[1-9]\d*$")

# Kinds whose names only need to be valid path segments in Kubernetes (RBAC, events).
_PATH_SEGMENT_NAMED = {
    "rbac.authorization.k8s.io/roles",
    "rbac.authorization.k8s.io/clusterroles",
    "rbac.authorization.k8s.io/rolebindings",
    "rbac.authorization.k8s.io/clusterrolebindings",
}
_LABEL_NAMED = {"namespaces"}


def validate_name(gr: str, name: Any) -> list[Cause]:
    if not isinstance(name, str) or not name:
        return [Cause("metadata.name", "Required value: name or generateName is required",
                      "FieldValueRequired")]
    if gr in _PATH_SEGMENT_NAMED:
        if name in (".", "..") or "/" in name or "%" in name:
            return [Cause("metadata.name", f'Invalid value: "{name}": may not contain "/" or '
                                           '"%"')]
        return []
    if gr in _LABEL_NAMED:
        if len(name) > 63 or not _DNS1123_LABEL.match(name):
            return [Cause("metadata.name", f'Invalid value: "{name}": a lowercase RFC 1123 label '
                                           "must consist of lower case alphanumeric characters "
                                           "or '-', and must start and end with an alphanumeric "
                                           "character")]
        return []
    if len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
        return [Cause("metadata.name", f'Invalid value: "{name}": a lowercase RFC 1123 subdomain '
                                       "must consist of lower case alphanumeric characters, '-' "
                                       "or '.', and must start and end with an alphanumeric "
                                       "character")]
    return []


# -- pods --------------------------------------------------------------------------------------



def _has_gpu_limit(spec: dict[str, Any]) -> bool:
    for c in spec.get("containers") or ():
        if not isinstance(c, dict):
            continue
        limits = (c.get("resources") or {}).get("limits") or {}
        if GPU_RESOURCE in limits:
            return True
    return False


def validate_gpu_annotations(annotations: dict[str, Any], spec: dict[str, Any],
                             base: str = "metadata.annotations") -> list[Cause]:
    causes: list[Cause] = []
    fraction = annotations.get(GPU_FRACTION)
    memory = annotations.get(GPU_MEMORY)
    devices = annotations.get(GPU_NUM_DEVICES)
    if fraction is not None:
        ok = isinstance(fraction, str) and bool(_DECIMAL.match(fraction.strip()))
        value = float(fraction) if ok else math.nan
        if not ok or not (0.0 < value < 1.0):
            causes.append(Cause(f"{base}.{GPU_FRACTION}", f'Invalid value: "{fraction}": must be '
                                                          "a decimal strictly between 0 and 1"))
        if memory is not None:
            causes.append(Cause(f"{base}.{GPU_FRACTION}", f"may not be set together with "
                                                          f"{GPU_MEMORY}", "FieldValueForbidden"))
        if _has_gpu_limit(spec):
            causes.append(Cause(f"{base}.{GPU_FRACTION}", f"may not be set together with a "
                                                          f"{GPU_RESOURCE} limit",
                                "FieldValueForbidden"))
    if memory is not None:
        if not isinstance(memory, str) or not _POSITIVE_INT.match(memory.strip()):
            causes.append(Cause(f"{base}.{GPU_MEMORY}", f'Invalid value: "{memory}": must be a '
                                                        "positive integer number of MiB"))
        if fraction is None and _has_gpu_limit(spec):
            causes.append(Cause(f"{base}.{GPU_MEMORY}", f"may not be set together with a "
                                                        f"{GPU_RESOURCE} limit",
                                "FieldValueForbidden"))
    if devices is not None:
        if fraction is None and memory is None:
            causes.append(Cause(f"{base}.{GPU_NUM_DEVICES}", f"requires {GPU_FRACTION} or "
                                                             f"{GPU_MEMORY}",
                                "FieldValueRequired"))
        if not isinstance(devices, str) or not _POSITIVE_INT.match(devices.strip()):
            causes.append(Cause(f"{base}.{GPU_NUM_DEVICES}", f'Invalid value: "{devices}": must '
                                                             "be an integer >= 1"))
    return causes


def validate_pod(obj: dict[str, Any], old: dict[str, Any] | None) -> list[Cause]:
    spec = obj.get("spec")
    causes = shapes.pod_spec_causes(spec, "spec") + shapes.volume_mount_causes(spec, "spec")
    annotations = obj["metadata"].get("annotations") or {}
    if isinstance(spec, dict):
        causes += validate_gpu_annotations(annotations, spec)
    if old is not None:
        fixed = pod_updates.update_causes(old, obj)
        causes += fixed
        old_node = (old.get("spec") or {}).get("nodeName")
        new_node = (spec or {}).get("nodeName") if isinstance(spec, dict) else None
        if old_node and new_node != old_node and not fixed:
            causes.append(Cause("spec.nodeName", "field is immutable once the pod is bound",
                                "FieldValueForbidden"))
    return causes


# -- workloads ---------------------------------------------------------------------------------


def _selector_matches(selector: Any, labels: dict[str, Any]) -> bool:
    if not isinstance(selector, dict):
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or ():
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def validate_workload(gr: str, obj: dict[str, Any]) -> list[Cause]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [Cause("spec", "Required value", "FieldValueRequired")]
    causes: list[Cause] = []
    template = spec.get("template")
    if not isinstance(template, dict):
        return [Cause("spec.template", "Required value", "FieldValueRequired")]
    causes += shapes.pod_spec_causes(template.get("spec"), "spec.template.spec")
    causes += shapes.volume_mount_causes(template.get("spec"), "spec.template.spec")
    tmeta = template.get("metadata") or {}
    annotations = tmeta.get("annotations") or {}
    if isinstance(template.get("spec"), dict):
        causes += validate_gpu_annotations(annotations, template["spec"],
                                           "spec.template.metadata.annotations")
    labels = tmeta.get("labels") or {}
    selector = spec.get("selector")
    if gr != "batch/jobs" or spec.get("manualSelector"):
        if not isinstance(selector, dict):
            causes.append(Cause("spec.selector", "Required value", "FieldValueRequired"))
        elif not _selector_matches(selector, labels):
            causes.append(Cause("spec.template.metadata.labels", "Invalid value: `selector` does "
                                                                 "not match template `labels`"))
    for key in ("replicas", "parallelism", "completions", "backoffLimit"):
        value = spec.get(key)
        if value is not None and (not isinstance(value, int) or value < 0):
            causes.append(Cause(f"spec.{key}", f"Invalid value: {value}: must be greater than "
                                               "or equal to 0"))
    if gr == "batch/jobs" and isinstance(template.get("spec"), dict):
        policy = template["spec"].get("restartPolicy")
        if policy not in ("OnFailure", "Never"):
            causes.append(Cause("spec.template.spec.restartPolicy",
                                f'Unsupported value: "{policy}": supported values: '
                                '"OnFailure", "Never"', "FieldValueNotSupported"))
    return causes


# -- queues and pod groups ---------------------------------------------------------------------

QueueLookup = Callable[[str], dict[str, Any] | None]


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    return None


def _lending_limit_causes(base: str, entry: dict[str, Any],
                          values: dict[str, float]) -> list[Cause]:
    """``lendingLimit``: at least 0, at most the quota (0 when unset), a finite quota."""
    lending = values.get("lendingLimit")
    if lending is None:
        return []
    problem = lending_limit_error(values.get("quota", 0.0), lending)
    if problem is None:
        return []
    return [Cause(f"{base}.lendingLimit", f"Invalid value: {entry['lendingLimit']}: {problem}")]


def _gpu_type_causes(base: str, raw: Any) -> list[Cause]:
    """``gpu.types``: per type, numbers; quota and limit -1 or at least 0, a finite limit
    not below a finite quota, a weight at least 0."""
    if raw is None:
        return []
    if not isinstance(raw, dict):
        return [Cause(f"{base}.types", "must be an object", "FieldValueTypeInvalid")]
    causes: list[Cause] = []
    for kind, entry in raw.items():
        where = f"{base}.types.{kind}"
        if not isinstance(entry, dict):
            causes.append(Cause(where, "must be an object", "FieldValueTypeInvalid"))
            continue
        values: dict[str, float] = {"quota": 0.0, "limit": -1.0, "overQuotaWeight": 1.0}
        bad = False
        for key in values:
            if entry.get(key) is None:
                continue
            num = _number(entry[key])
            if num is None or math.isnan(num) or math.isinf(num):
                causes.append(Cause(f"{where}.{key}", f'Invalid value: "{entry[key]}": must be '
                                                      "a number", "FieldValueTypeInvalid"))
                bad = True
                continue
            values[key] = num
        problem = None if bad else gpu_type_error(values["quota"], values["limit"],
                                                  values["overQuotaWeight"])
        if problem is not None:
            causes.append(Cause(f"{where}.{problem[0]}",
                                f"Invalid value: {entry.get(problem[0])}: {problem[1]}"))
    return causes


def validate_queue(obj: dict[str, Any], lookup: QueueLookup) -> list[Cause]:
    name = obj["metadata"]["name"]
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [Cause("spec", "Required value", "FieldValueRequired")]
    causes: list[Cause] = []
    resources = spec.get("resources")
    if resources is None:
        causes.append(Cause("spec.resources", "Required value: a queue must declare its "
                                              "resources", "FieldValueRequired"))
    elif not isinstance(resources, dict):
        causes.append(Cause("spec.resources", "must be an object", "FieldValueTypeInvalid"))
    else:
        for res, entry in resources.items():
            base = f"spec.resources.{res}"
            if res not in ("gpu", "cpu", "memory"):
                causes.append(Cause(base, 'Unsupported value: supported values: "gpu", "cpu", '
                                          '"memory"', "FieldValueNotSupported"))
                continue
            if entry is None:
                continue
            if not isinstance(entry, dict):
                causes.append(Cause(base, "must be an object", "FieldValueTypeInvalid"))
                continue
            values: dict[str, float] = {}
            for key in ("quota", "limit", "overQuotaWeight", "lendingLimit"):
                if key not in entry or entry[key] is None:
                    continue
                num = _number(entry[key])
                if num is None or math.isnan(num) or math.isinf(num):
                    causes.append(Cause(f"{base}.{key}", f'Invalid value: "{entry[key]}": must '
                                                         "be a number",
                                        "FieldValueTypeInvalid"))
                    continue
                if key == "lendingLimit":
                    pass  # checked with the quota below
                elif key == "overQuotaWeight" and num < 0:
                    causes.append(Cause(f"{base}.{key}", f"Invalid value: {entry[key]}: must be "
                                                         "greater than or equal to 0"))
                elif key != "overQuotaWeight" and num < 0 and num != -1:
                    causes.append(Cause(f"{base}.{key}", f"Invalid value: {entry[key]}: must be "
                                                         "non-negative or -1 (unlimited)"))
                values[key] = num
            causes += _lending_limit_causes(base, entry, values)
            if res == "gpu":
                causes += _gpu_type_causes(base, entry.get("types"))
            elif entry.get("types") is not None:
                causes.append(Cause(f"{base}.types", "Forbidden: only gpu has figures per "
                                                     "type", "FieldValueForbidden"))
            quota, limit = values.get("quota"), values.get("limit")
            if quota is not None and limit is not None and limit != -1 and (
                quota == -1 or quota > limit
            ):
                causes.append(Cause(f"{base}.quota", f"Invalid value: {entry['quota']}: quota "
                                                     f"may not exceed limit ({entry['limit']})"))
    priority = spec.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        causes.append(Cause("spec.priority", f'Invalid value: "{priority}": must be an integer',
                            "FieldValueTypeInvalid"))
    parent = spec.get("parentQueue")
    if parent is not None and parent != "":
        if not isinstance(parent, str):
            causes.append(Cause("spec.parentQueue", "must be a string", "FieldValueTypeInvalid"))
        elif parent == name:
            causes.append(Cause("spec.parentQueue", f'Invalid value: "{parent}": a queue cannot '
                                                    "be its own parent"))
        elif lookup(parent) is None:
            causes.append(Cause("spec.parentQueue", f'Invalid value: "{parent}": parent queue '
                                                    "does not exist", "FieldValueNotFound"))
        else:
            seen = {name}
            cur: str | None = parent
            while cur:
                if cur in seen:
                    causes.append(Cause("spec.parentQueue", f'Invalid value: "{parent}": would '
                                                            "create a cycle in the queue tree"))
                    break
                seen.add(cur)
                q = lookup(cur)
                cur = ((q or {}).get("spec") or {}).get("parentQueue") if q else None
    return causes


def validate_podgroup(obj: dict[str, Any]) -> list[Cause]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [Cause("spec", "Required value", "FieldValueRequired")]
    causes: list[Cause] = []
    for key in ("minMember", "minSubGroup"):
        value = spec.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            causes.append(Cause(f"spec.{key}", f'Invalid value: "{value}": must be an integer',
                                "FieldValueTypeInvalid"))
        elif value < 0:
            causes.append(Cause(f"spec.{key}", f"Invalid value: {value}: must be greater than "
                                               "or equal to 0"))
    if spec.get("minMember") and spec.get("minSubGroup"):
        causes.append(Cause("spec.minSubGroup", "may not be set together with minMember",
                            "FieldValueForbidden"))
    return causes


def validate_priority_class(obj: dict[str, Any]) -> list[Cause]:
    value = obj.get("value")
    if value is None:
        return [Cause("value", "Required value", "FieldValueRequired")]
    if isinstance(value, bool) or not isinstance(value, int):
        return [Cause("value", f'Invalid value: "{value}": must be an integer',
                      "FieldValueTypeInvalid")]
    if value > 1_000_000_000:
        return [Cause("value", f"Invalid value: {value}: must be no greater than 1000000000 "
                               "(higher values are reserved for system classes)")]
    policy = obj.get("preemptionPolicy")
    if policy not in (None, "PreemptLowerPriority", "Never"):
        return [Cause("preemptionPolicy", f'Unsupported value: "{policy}": supported values: '
                                          '"PreemptLowerPriority", "Never"',
                      "FieldValueNotSupported")]
    return []
