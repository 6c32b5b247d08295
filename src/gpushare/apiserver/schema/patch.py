"""PATCH bodies: JSON merge patch, JSON patch, and strategic merge patch of built-in kinds.

Strategic merge patch follows the kind's schema (`schemas`, generated from Kubernetes'
published definitions): a list is merged item by item only where its field declares
`x-kubernetes-patch-strategy: merge` with an `x-kubernetes-patch-merge-key` (a Service's
`ports` by `port`, a container's `ports` by `containerPort`), merged as a set where the
strategy is `merge` on scalars (`finalizers`), and replaced otherwise (`taints`,
`tolerations`), exactly as Kubernetes does.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from gpushare.apiserver.errors import ApiError
from gpushare.apiserver.schema import schemas
from gpushare.apiserver.schema.schemas import Schema

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
    """RFC 6902, one operation at a time, so that a failure names the operation and path
    (never the document)."""
    if not isinstance(ops, list):
        raise ApiError(400, "a JSON patch must be a list of operations")
    doc = copy.deepcopy(target)
    for i, op in enumerate(ops):
        if not isinstance(op, dict) or not isinstance(op.get("op"), str):
            raise ApiError(400, f"the JSON patch operation at index {i} is not an object "
                                'with an "op"', "BadRequest")
        name, path = op["op"], op.get("path")
        if name not in ("add", "remove", "replace", "move", "copy", "test"):
            raise ApiError(400, f"Unexpected kind: {name}", "BadRequest")
        if not isinstance(path, str):
            raise ApiError(400, f'the JSON patch operation "{name}" at index {i} has no '
                                "path", "BadRequest")
        try:
            doc = jsonpatch.JsonPatch([op]).apply(doc, in_place=True)
        except jsonpatch.JsonPatchTestFailed as e:
            raise ApiError(422, f"testing value {path} failed", "Invalid") from e
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError,
                KeyError, IndexError, ValueError) as e:
            where = op.get("from", path) if name in ("move", "copy") else path
            raise ApiError(422, f"jsonpatch {name} operation does not apply: doc is missing "
                                f'path: "{where}": missing value', "Invalid") from e
    return doc


def strategic_merge_patch(target: Any, patch: Any, schema: Schema | None = None) -> Any:
    """Patch `target` (an object of the kind `schema` describes; None: no list merges)."""
    if not isinstance(patch, dict):
        raise ApiError(400, "a strategic merge patch must be a JSON object")
    return _merge_map(target if isinstance(target, dict) else {}, patch, schemas.resolve(schema))


def list_strategy(schema: Schema | None) -> tuple[bool, str | None]:
    """(merge, merge key) of a list field's schema."""
    if schema is None:
        return False, None
    strategy = str(schema.get("x-kubernetes-patch-strategy") or "")
    return "merge" in strategy.split(","), schema.get("x-kubernetes-patch-merge-key")


def _merge_map(target: dict[str, Any], patch: dict[str, Any],
               schema: Schema | None) -> dict[str, Any]:
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
        sub = schemas.field(schema, key)
        if isinstance(value, dict):
            result[key] = _merge_map(current if isinstance(current, dict) else {}, value,
                                     schemas.resolve(sub))
        elif isinstance(value, list):
            result[key] = _merge_list(sub, current if isinstance(current, list) else [], value)
        else:
            result[key] = value
    for field, order in orders.items():
        if isinstance(result.get(field), list):
            _merge, merge_key = list_strategy(schemas.field(schema, field))
            result[field] = _reorder(merge_key, result[field], order)
    if isinstance(retain, list):
        keep = set(retain)
        result = {k: v for k, v in result.items() if k in keep}
    return result


def _merge_list(schema: Schema | None, target: list[Any], patch: list[Any]) -> list[Any]:
    if any(isinstance(p, dict) and p.get(_DIRECTIVE) == "replace" for p in patch):
        return [_strip(p) for p in patch
                if not (isinstance(p, dict) and p.get(_DIRECTIVE) == "replace")]
    merge, key = list_strategy(schema)
    if not merge:
        return [_strip(p) for p in patch]
    if key is None:
        out = list(target)
        for p in patch:
            if p not in out:
                out.append(p)
        return out
    if not all(isinstance(p, dict) for p in patch):
        return [copy.deepcopy(p) for p in patch]
    item_schema = schemas.resolve(schemas.items(schema))
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
            out.append(_merge_map({}, p, item_schema))
        else:
            out[idx] = _merge_map(out[idx], p, item_schema)
    return out


def _strip(value: Any) -> Any:
    """A replaced list's items as given, without patch directives."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _reorder(key: str | None, items: list[Any], order: list[Any]) -> list[Any]:

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
