"""Server-side field validation (`?fieldValidation=Strict|Warn|Ignore`), as Kubernetes.

A write's body is checked against its kind's schema (the built-in OpenAPI definitions,
or a CustomResourceDefinition's structural schema) for fields the schema does not declare,
and — when the client asked for `Strict` or `Warn` — for fields written twice:

* `Strict`: 400 ``<Kind> in version "<v>" cannot be handled as a <Kind>: strict decoding
  error: unknown field "metadata.anotations", duplicate field "spec.replicas"``;
* `Warn` (the default when the client says nothing): stored without the unknown fields
  (the last of duplicates kept), each one a ``Warning: 299 - "..."`` response header;
* `Ignore`: the unknown fields are dropped silently.

Duplicates are found only when the client asks for `Strict` or `Warn` by name (kubectl
always does), so the controllers' writes are not parsed twice.

The request's findings travel in a context variable: the HTTP layer starts a report
(`begin`), notes the body's duplicates (`note_duplicates`, found by
``http/duplicates.py``) and turns the warnings into headers (`take_warnings`); the write
path (``registry/strategy.py``) drops unknown fields (`prune`).
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from gpushare.apiserver.errors import bad_request
from gpushare.apiserver.objects import UNCHANGED_DEPTH, unchanged_fields
from gpushare.apiserver.resources import ResourceInfo
from gpushare.apiserver.schema import schemas

STRICT, WARN, IGNORE = "Strict", "Warn", "Ignore"
MODES = (STRICT, WARN, IGNORE)
_OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


@dataclass
class Report:
    """What one request's field validation found."""

    mode: str = ""
    duplicates: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


_REPORT: ContextVar[Report | None] = ContextVar("gpushare_field_validation", default=None)


def begin(mode: str) -> str:
    """Start the request's report; 400 for a value that is none of the three."""
    if mode and mode not in MODES:
        _REPORT.set(None)
        raise bad_request(f'fieldValidation: Unsupported value: "{mode}": supported values: '
                          '"Ignore", "Strict", "Warn"')
    _REPORT.set(Report(mode))
    return mode


def take_warnings() -> list[str]:
    """The request's warnings (each one a ``Warning`` header), then forget the report."""
    report = _REPORT.get()
    _REPORT.set(None)
    return report.warnings if report is not None else []


def wants_duplicates() -> bool:
    """Whether the request named Strict or Warn: only then is its body scanned for fields
    written twice."""
    report = _REPORT.get()
    return report is not None and report.mode in (STRICT, WARN)


def note_duplicates(found: list[str]) -> None:
    """Record the fields the request's body writes twice (paths, or YAML's line notes)."""
    report = _REPORT.get()
    if report is not None:
        report.duplicates = found


def prune(info: ResourceInfo, obj: dict[str, Any], mode: str,
          custom_unknown: list[str] | None = None, stored: Any = None) -> None:
    """Drop the fields `obj`'s schema does not declare; 400 under Strict (with the
    duplicates the body had), warnings under Warn or no mode. For a custom resource,
    `custom_unknown` are the fields its structural schema pruned (``registry/crds.py``).
    `stored`: the object as stored (pruned when it was written), whose first levels a
    write left as they are are not walked again."""
    if info.crd:
        unknown = list(custom_unknown or [])
    else:
        unknown = prune_builtin(obj, builtin_definition(info), stored)
    meta = obj.get("metadata")
    if info.crd and isinstance(meta, dict):
        unknown = _prune_object(meta, schemas.definitions().get(_OBJECT_META), "metadata",
                                stored.get("metadata") if isinstance(stored, dict) else None,
                                1) + unknown
    report = _REPORT.get()
    duplicates = report.duplicates if report is not None else []
    if mode == IGNORE:
        return
    problems = [f'duplicate field "{d}"' for d in duplicates if not d.startswith("line ")]
    problems += [d for d in duplicates if d.startswith("line ")]
    problems += [f'unknown field "{u}"' for u in unknown]
    if not problems:
        return
    if mode == STRICT:
        raise bad_request(f'{info.kind} in version "{info.version}" cannot be handled as a '
                          f"{info.kind}: strict decoding error: {', '.join(problems)}")
    if report is not None:
        report.warnings.extend(problems)
        report.duplicates = []


def builtin_definition(info: ResourceInfo) -> schemas.Schema | None:
    if info.storage_group_resource:  # stored in the core form
        return schemas.kind_schema("", "v1", info.kind)
    return schemas.kind_schema(info.group, info.version, info.kind)


def prune_builtin(obj: dict[str, Any], schema: schemas.Schema | None,
                  stored: Any = None) -> list[str]:
    """Remove (and return the paths of) the fields a built-in kind does not declare."""
    if schema is None:
        return []
    return _prune_object(obj, schema, "", stored)


def _prune_object(value: dict[str, Any], schema: schemas.Schema | None,
                  path: str, stored: Any = None, depth: int = 0) -> list[str]:
    removed: list[str] = []
    stack: list[tuple[Any, schemas.Schema | None, str, Any, int]] = [
        (value, schema, path, stored, depth)]
    while stack:
        node, node_schema, where, before, level = stack.pop()
        if node_schema is None:
            continue
        if isinstance(node, list):
            item = schemas.resolve(schemas.items(node_schema))
            for i, entry in enumerate(node):
                stack.append((entry, item, f"{where}[{i}]", None, level + 1))
            continue
        if not isinstance(node, dict):
            continue
        props = node_schema.get("properties")
        extra = node_schema.get("additionalProperties")
        if not isinstance(props, dict) and not isinstance(extra, dict):
            continue  # free-form (RawExtension, FieldsV1, JSON): anything goes
        prev = before if level < UNCHANGED_DEPTH and isinstance(before, dict) else None
        same = unchanged_fields(node, prev) if prev is not None else set()
        for key in list(node):
            if key in same:
                continue  # as stored: pruned when it was written
            child = schemas.child(node_schema, key)
            sub = f"{where}.{key}" if where else key
            if child is None and not (isinstance(props, dict) and key in props):
                removed.append(sub)
                del node[key]
            elif isinstance(node[key], dict | list):
                stack.append((node[key], child, sub,
                              prev.get(key) if prev is not None else None, level + 1))
    removed.sort()
    return removed
