"""The fields a request body writes twice, for server-side field validation
(``schema/fieldvalidation.py``): found only when the client named ``Strict`` or ``Warn``
(kubectl always does), so the controllers' writes are not parsed twice. JSON paths
(``spec.replicas``) for JSON bodies, YAML's own line notes for YAML ones."""

from __future__ import annotations

import json
from typing import Any

import yaml

from gpushare.apiserver.http.limits import BoundedLoader
from gpushare.apiserver.schema import fieldvalidation

_YAML = ("application/apply-patch+yaml", "application/yaml", "application/x-yaml")
_JSON = ("application/json", "application/merge-patch+json",
         "application/strategic-merge-patch+json", "")


def scan_body(raw: bytes, content_type: str) -> None:
    """Note the fields `raw` writes twice, when the client named Strict or Warn."""
    if not fieldvalidation.wants_duplicates():
        return
    try:
        if content_type in _YAML:
            fieldvalidation.note_duplicates(_yaml_duplicates(raw))
        elif content_type in _JSON:
            fieldvalidation.note_duplicates(_json_duplicates(raw))
    except (ValueError, yaml.YAMLError, RecursionError):
        return  # the body's own parse reports what is wrong with it


class _Pairs(dict[str, Any]):
    """A JSON object that remembers the keys it was given more than once."""

    twice: list[str]


def _pairs(items: list[tuple[str, Any]]) -> _Pairs:
    out = _Pairs()
    out.twice = []
    for key, value in items:
        if key in out:
            out.twice.append(key)
        out[key] = value
    return out


def _json_duplicates(raw: bytes) -> list[str]:
    tree = json.loads(raw, object_pairs_hook=_pairs)
    found: list[str] = []
    stack: list[tuple[Any, str]] = [(tree, "")]
    while stack:
        node, where = stack.pop()
        if isinstance(node, _Pairs):
            found.extend(f"{where}.{k}" if where else k for k in node.twice)
            stack.extend((v, f"{where}.{k}" if where else k) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(node))
    return sorted(set(found))


class _DuplicateLoader(BoundedLoader):
    """The API's YAML loader, noting keys set twice in one mapping."""

    found: list[str]

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _value in node.value:
                key = key_node.value
                if key in seen:
                    self.found.append(f'line {key_node.start_mark.line + 1}: key "{key}" '
                                      "already set in map")
                seen.add(key)
        return super().construct_mapping(node, deep)


def _yaml_duplicates(raw: bytes) -> list[str]:
    loader = _DuplicateLoader(raw)
    loader.found = []
    try:
        loader.get_single_data()
    finally:
        loader.dispose()
    return loader.found
