"""Scheduling actions. Each is ``fn(session) -> None`` registered under its name."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from gpushare.scheduler.session import Session

Action = Callable[[Session], None]

_ACTIONS: dict[str, Action] = {}


def register_action(name: str, fn: Action) -> None:
    """Make an action available to cycles by name (a later registration replaces it)."""
    _ACTIONS[name] = fn


def get_action(name: str) -> Action | None:
    _load_builtin()
    return _ACTIONS.get(name)


def registered_actions() -> list[str]:
    _load_builtin()
    return sorted(_ACTIONS)


_loaded = False


def _load_builtin() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    from gpushare.scheduler.actions import allocate  # noqa: F401 - registers itself

    with contextlib.suppress(ImportError):
        import gpushare.scheduler.victims  # noqa: F401 - registers the eviction actions
