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
