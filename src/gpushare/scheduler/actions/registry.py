"""The explicit action registry: every action the cycle can run, by name.

Nothing registers itself on import and no import error is swallowed: if one action's
module cannot be imported, importing the registry (and so the scheduler) fails. A name
that is not here is an error, not a silent skip.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from gpushare.scheduler.actions.allocate import allocate
from gpushare.scheduler.actions.consolidation import consolidation
from gpushare.scheduler.actions.preempt import preempt
from gpushare.scheduler.actions.reclaim import reclaim
from gpushare.scheduler.actions.stalegangeviction import evict_stale_gangs
from gpushare.scheduler.session import Session

Action = Callable[[Session], None]

ACTIONS: Mapping[str, Action] = MappingProxyType({
    "allocate": allocate,
    "consolidation": consolidation,
    "reclaim": reclaim,
    "preempt": preempt,
    "stalegangeviction": evict_stale_gangs,
})


class UnknownActionError(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


def get_action(name: str) -> Action:
    """The action called ``name``; an unknown name raises ``UnknownActionError``."""
    try:
        return ACTIONS[name]
    except KeyError:
        known = ", ".join(ACTIONS)
        raise UnknownActionError(f"unknown action {name!r} (known: {known})") from None


def action_names() -> tuple[str, ...]:
    return tuple(ACTIONS)
