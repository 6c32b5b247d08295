"""`x-kubernetes-validations` of CRD schemas: CEL rules evaluated with cel-python.

Each rule sees `self` (the value at the schema node) and, on updates, `oldSelf` (the stored
value at the same place). Rules that mention `oldSelf` are transition rules: they are
evaluated only on updates where the old value exists, as in Kubernetes. Supported: the CEL
standard language as cel-python implements it (comparisons, arithmetic, `&&`/`||`/`!`,
`has()`, `size()`, `in`, string functions such as `startsWith`, `endsWith`, `contains`,
`matches`, list macros `all`, `exists`, `exists_one`, `map`, `filter`). Kubernetes'
extension libraries (`isSorted`, `quantity()`, `url()`, `ip()`, `format`) are not.
"""

from __future__ import annotations

import functools
import re
from typing import Any

_OLD_SELF = re.compile(r"\boldSelf\b")


@functools.cache
def _celpy() -> Any:
    # Imported on first use: building cel-python's grammar takes a second or two, which
    # servers without CEL rules should not pay at start-up.
    import celpy

    return celpy


@functools.cache
def _env() -> Any:
    return _celpy().Environment()


class RuleError(ValueError):
    """A rule that does not compile."""


@functools.lru_cache(maxsize=4096)
def _program(rule: str) -> Any:
    try:
        env = _env()
        return env.program(env.compile(rule))
    except Exception as e:  # cel-python raises its own parse errors
        raise RuleError(f"compilation failed: {str(e).splitlines()[0] if str(e) else e}") from e


def check(rule: str) -> str | None:
    """Why `rule` does not compile, or None."""
    try:
        _program(rule)
    except RuleError as e:
        return str(e)
    return None


def is_transition(rule: str) -> bool:
    return bool(_OLD_SELF.search(rule))


def evaluate(rule: str, value: Any, old: Any, has_old: bool) -> tuple[bool, str]:
    """(passed, error text) of one rule on one value."""
    try:
        program = _program(rule)
    except RuleError as e:
        return False, str(e)
    celpy = _celpy()
    activation = {"self": celpy.json_to_cel(value)}
    if has_old:
        activation["oldSelf"] = celpy.json_to_cel(old)
    try:
        result = program.evaluate(activation)
    except Exception as e:
        return False, f"evaluation error: {e}"
    if isinstance(result, celpy.CELEvalError):
        return False, f"evaluation error: {result.args[0] if result.args else result}"
    return bool(result), ""
