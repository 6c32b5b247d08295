"""PATCH bodies: JSON merge patch, JSON patch, and strategic merge patch of built-in kinds."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from gpushare.apiserver.errors import ApiError

# Lists of built-in kinds merged item by item, keyed by this field (by the list's field name:
# unambiguous for the kinds this server serves).
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "conditions": "type",
    "ownerReferences": "uid",
    "taints": "key",
    "addresses": "type",
    "hostAliases": "ip",
    "podIPs": "ip",
    "hostIPs": "ip",
    "resourceClaims": "name",
    "topologySpreadConstraints": "topologyKey",
}
# Lists of scalars merged as sets.
MERGE_SETS = {"finalizers"}

_DIRECTIVE = "$patch"
_ORDER_PREFIX = "$setElementOrder/"
_DELETE_PRIMITIVE_PREFIX = "$deleteFromPrimitiveList/"
_RETAIN_KEYS = "$retainKeys"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(target: Any, ops: Any) -> Any:
    if not isinstance(ops, list):
        raise ApiError(400, "a JSON patch must be a list of operations")
    try:
        return jsonpatch.JsonPatch(ops).apply(target)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError) as e:
        raise ApiError(422, f"the JSON patch could not be applied: {e}") from e


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        raise ApiError(400, "a strategic merge patch must be a JSON object")
    return _merge_map(target if isinstance(target, dict) else {}, patch)


def _merge_map(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    directive = patch.get(_DIRECTIVE)
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if not k.startswith("$")}
    if directive == "delete":
        return {}
    result = dict(target)
    retain = patch.get(_RETAIN_KEYS)
    orders: dict[str, list[Any]] = {}
    for key, value in patch.items():
        if key in (_DIRECTIVE, _RETAIN_KEYS):
            continue
        if key.startswith(_ORDER_PREFIX):
            orders[key[len(_ORDER_PREFIX):]] = value or []
            continue
        if key.startswith(_DELETE_PRIMITIVE_PREFIX):
            field = key[len(_DELETE_PRIMITIVE_PREFIX):]
            current = result.get(field)
            if isinstance(current, list):
                drop = value or []
                result[field] = [v for v in current if v not in drop]
            continue
        if value is None:
            result.pop(key, None)
            continue
        current = result.get(key)
        if isinstance(value, dict):
            result[key] = _merge_map(current if isinstance(current, dict) else {}, value)
        elif isinstance(value, list):
            result[key] = _merge_list(key, current if isinstance(current, list) else [], value)
        else:
            result[key] = value
    for field, order in orders.items():
        if isinstance(result.get(field), list):
            result[field] = _reorder(field, result[field], order)
    if isinstance(retain, list):
        keep = set(retain)
        result = {k: v for k, v in result.items() if k in keep}
    return result


def _merge_list(field: str, target: list[Any], patch: list[Any]) -> list[Any]:
    if any(isinstance(p, dict) and p.get(_DIRECTIVE) == "replace" for p in patch):
        return [copy.deepcopy(p) for p in patch
                if not (isinstance(p, dict) and p.get(_DIRECTIVE) == "replace")]
    if field in MERGE_SETS:
        out = list(target)
        for p in patch:
            if p not in out:
                out.append(p)
        return out
    key = MERGE_KEYS.get(field)
    if key is None or not all(isinstance(p, dict) for p in patch):
        return [copy.deepcopy(p) for p in patch]
    out = [dict(t) if isinstance(t, dict) else t for t in target]
    for p in patch:
        ident = p.get(key)
        idx = next((i for i, t in enumerate(out) if isinstance(t, dict) and t.get(key) == ident),
                   None)
        if p.get(_DIRECTIVE) == "delete":
            if idx is not None:
                out.pop(idx)
            continue
        if idx is None:
            out.append(_merge_map({}, p))
        else:
            out[idx] = _merge_map(out[idx], p)
    return out


def _reorder(field: str, items: list[Any], order: list[Any]) -> list[Any]:
    key = MERGE_KEYS.get(field)

    def ident(item: Any) -> Any:
        if key is not None and isinstance(item, dict):
            return item.get(key)
        return item

    wanted = [ident(o) if isinstance(o, dict) else o for o in order]
    position = {w: i for i, w in enumerate(wanted) if not isinstance(w, dict | list)}
    listed = [it for it in items if _hashable(ident(it)) and ident(it) in position]
    listed.sort(key=lambda it: position[ident(it)])
    rest = [it for it in items if not (_hashable(ident(it)) and ident(it) in position)]
    return listed + rest


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True
