"""Validation rules of built-in kinds that Kubernetes' conformance tests hold the API to:
ConfigMap and Secret keys, immutable ConfigMaps and Secrets. Pure functions returning
field causes."""

from __future__ import annotations

import re
from typing import Any

from gpushare.apiserver.errors import Cause

_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


def _config_keys(obj: dict[str, Any], fields: tuple[str, ...]) -> list[Cause]:
    causes: list[Cause] = []
    seen: dict[str, str] = {}
    for field in fields:
        data = obj.get(field)
        if data is None:
            continue
        if not isinstance(data, dict):
            causes.append(Cause(field, "must be a map", "FieldValueTypeInvalid"))
            continue
        for key in data:
            if not isinstance(key, str) or len(key) > 253 or not _CONFIG_KEY.match(key):
                causes.append(Cause(f"{field}[{key}]", f'Invalid value: "{key}": a valid config '
                                                       "key must consist of alphanumeric "
                                                       "characters, '-', '_' or '.' (e.g. "
                                                       "'key.name',  or 'KEY_NAME',  or "
                                                       "'key-name', regex used for validation "
                                                       "is '[-._a-zA-Z0-9]+')"))
            elif key in (".", ".."):
                causes.append(Cause(f"{field}[{key}]", f'Invalid value: "{key}": must not be '
                                                       f"'{key}'"))
            elif key in seen and seen[key] != field and field != "stringData":
                causes.append(Cause(f"{field}[{key}]", f'Invalid value: "{key}": duplicate of '
                                                       f"key present in {seen[key]}"))
            seen.setdefault(key, field)
    return causes


def _immutable(obj: dict[str, Any], old: dict[str, Any] | None,
               fields: tuple[str, ...]) -> list[Cause]:
    if old is None or not old.get("immutable"):
        return []
    causes: list[Cause] = []
    if not obj.get("immutable"):
        causes.append(Cause("immutable", "Forbidden: field is immutable when `immutable` is "
                                         "set", "FieldValueForbidden"))
    for field in fields:
        if obj.get(field) != old.get(field):
            causes.append(Cause(field, "Forbidden: field is immutable when `immutable` is set",
                                "FieldValueForbidden"))
    return causes


def validate_configmap(obj: dict[str, Any], old: dict[str, Any] | None) -> list[Cause]:
    return (_config_keys(obj, ("data", "binaryData"))
            + _immutable(obj, old, ("data", "binaryData")))


def validate_secret(obj: dict[str, Any], old: dict[str, Any] | None) -> list[Cause]:
    causes = _config_keys(obj, ("data", "stringData")) + _immutable(obj, old, ("data",))
    if old is not None and obj.get("type") != old.get("type"):
        causes.append(Cause("type", f'Invalid value: "{obj.get("type")}": field is immutable',
                            "FieldValueInvalid"))
    return causes


RULES = {"configmaps": validate_configmap, "secrets": validate_secret}
