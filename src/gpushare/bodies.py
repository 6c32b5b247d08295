"""Typed reads of raw Kubernetes objects (the JSON dicts the API server stores and the
clients pass around), for code that must not trust their shape: a field that is missing
or of the wrong type reads as empty instead of raising."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def field_dict(obj: Mapping[str, Any], key: str) -> dict[str, Any]:
    """``obj[key]`` when it is an object, else ``{}``."""
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def field_list(obj: Mapping[str, Any], key: str) -> list[Any]:
    """``obj[key]`` when it is a list, else ``[]``."""
    value = obj.get(key)
    return value if isinstance(value, list) else []


def controller_reference(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The owner that controls ``obj``: the controller=true reference, else the first."""
    refs = field_dict(obj, "metadata").get("ownerReferences") or []
    for ref in refs:
        if ref.get("controller"):
            return ref  # type: ignore[no-any-return]
    return refs[0] if refs else None  # type: ignore[no-any-return]
