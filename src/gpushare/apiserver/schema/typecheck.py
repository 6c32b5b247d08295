"""The JSON types of a request body against its kind's published schema, at decoding.

Kubernetes decodes a body into typed structs: a string where an object belongs is refused
before anything reads the body (400, `... cannot be handled as a Binding: ...`). The
bodies that are read directly (Binding, Eviction, Scale, the reviews, DeleteOptions) and
every write of a built-in kind are checked here against the built-in OpenAPI definitions
(`builtin_schemas.json`), so that a nested wrong type is answered 400 naming the field
instead of failing deep inside (a 500). `null` is accepted anywhere (an unset field), a
quantity may be a number, an int-or-string either. Pure.
"""

from __future__ import annotations

from typing import Any

from gpushare.apiserver.errors import ApiError, bad_request
from gpushare.apiserver.objects import UNCHANGED_DEPTH, unchanged_fields
from gpushare.apiserver.schema import schemas

_LIMIT = 5


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _fits(value: Any, kind: str, fmt: Any) -> bool:
    got = _json_type(value)
    if fmt == "int-or-string":
        return got in ("integer", "string")
    if fmt == "quantity":
        return got in ("integer", "number", "string")
    if kind == "number":
        return got in ("integer", "number")
    return got == kind


def mismatches(value: Any, schema: Any, path: str = "", stored: Any = None) -> list[str]:
    """`path: expected T, got U` for each value of the wrong JSON type (at most a few).

    `stored`: the object as stored (checked when it was written); the fields of its first
    levels that a write left as they are are not checked again."""
    out: list[str] = []
    stack: list[tuple[Any, Any, str, Any, int]] = [(value, schema, path, stored, 0)]
    while stack and len(out) < _LIMIT:
        node, sch, where, before, depth = stack.pop()
        sch = schemas.resolve(sch)
        if node is None or sch is None or sch.get("x-kubernetes-preserve-unknown-fields"):
            continue
        kind = sch.get("type")
        if kind is None and "properties" in sch:
            kind = "object"
        if not isinstance(kind, str):
            continue
        if not _fits(node, kind, sch.get("format")):
            out.append(f"{where or '<body>'}: expected {kind}, got {_json_type(node)}")
            continue
        if isinstance(node, dict):
            prev = before if depth < UNCHANGED_DEPTH and isinstance(before, dict) else None
            same = unchanged_fields(node, prev) if prev is not None else set()
            for key, sub in node.items():
                child = schemas.field(sch, key)
                if child is not None and key not in same:
                    stack.append((sub, child, f"{where}.{key}" if where else key,
                                  prev.get(key) if prev is not None else None, depth + 1))
        elif isinstance(node, list):
            item = schemas.items(sch)
            if item is not None:
                stack.extend((sub, item, f"{where}[{i}]", None, depth + 1)
                             for i, sub in enumerate(node))
    return out


def check(body: Any, group: str, version: str, kind: str) -> None:
    """400 naming the fields of `body` whose JSON type the kind's schema does not allow."""
    schema = schemas.kind_schema(group, version, kind)
    if schema is None:
        raise ApiError(500, f"no schema for {group}/{version} {kind}", "InternalError")
    check_against(body, schema, version, kind)


def check_against(body: Any, schema: Any, version: str, kind: str,
                  stored: Any = None) -> None:
    """`check` with the schema given (and the object as stored, for a write that
    replaces it)."""
    found = mismatches(body, schema, stored=stored)
    if found:
        raise bad_request(f'{kind} in version "{version}" cannot be handled as a {kind}: '
                          + "; ".join(found))
