"""Strict reading of YAML documents (scenario files, the scheduler's configuration): every
key known, every value checked, errors by path.

Keys that start with ``x-`` are annotations and ignored wherever they appear.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any

from gpushare.model.quantities import QuantityError, to_fraction


class ScenarioError(ValueError):
    """A document that does not follow its format; the message names the path."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path


def join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def check_keys(value: Any, path: str, allowed: set[str] | frozenset[str]) -> dict[str, Any]:
    """A mapping whose keys are all known (``x-`` keys dropped)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ScenarioError(path, f"expected a mapping, got {type(value).__name__}")
    out: dict[str, Any] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise ScenarioError(join(path, str(key)), "keys must be strings")
        if key.startswith("x-"):
            continue
        if key not in allowed:
            raise ScenarioError(join(path, key), "unknown key")
        out[key] = item
    return out


def as_list(value: Any, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ScenarioError(path, f"expected a list, got {type(value).__name__}")
    return value


def as_str(value: Any, path: str, choices: tuple[str, ...] | None = None) -> str:
    if not isinstance(value, str) or not value:
        raise ScenarioError(path, f"expected a non-empty string, got {value!r}")
    if choices is not None and value not in choices:
        raise ScenarioError(path, f"expected one of {', '.join(choices)}, got {value!r}")
    return value


def as_opt_str(value: Any, path: str) -> str | None:
    return None if value is None else as_str(value, path)


def as_int(value: Any, path: str, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ScenarioError(path, f"expected an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ScenarioError(path, f"must be at least {minimum}, got {value}")
    return int(value)


def as_number(value: Any, path: str, minimum: Fraction | int | None = None) -> Fraction:
    try:
        number = to_fraction(value)
    except QuantityError as err:
        raise ScenarioError(path, str(err)) from None
    if minimum is not None and number < minimum:
        raise ScenarioError(path, f"must be at least {minimum}, got {value!r}")
    return number


def as_bool(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise ScenarioError(path, f"expected true or false, got {value!r}")
    return value


def as_str_map(value: Any, path: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ScenarioError(path, f"expected a mapping, got {type(value).__name__}")
    out = {}
    for k, v in value.items():
        if isinstance(k, str) and k.startswith("x-"):
            continue
        if not isinstance(v, str | int | float | bool):
            raise ScenarioError(join(path, str(k)), f"expected a string, got {v!r}")
        out[str(k)] = str(v).lower() if isinstance(v, bool) else str(v)
    return out


def get(mapping: Mapping[str, Any], key: str, path: str, read: Callable[..., Any],
        default: Any = None, **kw: Any) -> Any:
    if key not in mapping or (mapping[key] is None and default is not None):
        return default
    return read(mapping[key], join(path, key), **kw)
