"""Back-off for pods whose bind keeps failing.

A pod the binder cannot bind (a node that refuses it, an admission rule that rejects
the binding) is pending again after the failure and, unchanged, would win the same
place in the next cycle, and in every cycle after it, starving the pods behind it.
A first failure may be passing (a dropped connection): the pod is tried again in the
next cycle. After its n-th failure in a row (n >= 2) it sits out
``min(2**(n-2), MAX_SKIPPED_CYCLES)`` cycles — 1, 2, 4, ... — left out of every action
(not placed, and nothing is evicted for it), then considered again. A successful
bind, or the pod's deletion, forgets the failures.

Pure state counted in cycles (no clock): the shell reports failures and successes
(``bind_failed``, ``forget``), the state advances it once per cycle (``next_cycle``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: The longest a pod sits out after failed binds, in cycles.
MAX_SKIPPED_CYCLES = 64


def skipped_cycles(failures: int) -> int:
    """Cycles a pod sits out after ``failures`` failed binds in a row: none after the
    first, then 1, 2, 4, ... up to ``MAX_SKIPPED_CYCLES``."""
    if failures <= 1:
        return 0
    return min(1 << min(failures - 2, 30), MAX_SKIPPED_CYCLES)


@dataclass(slots=True)
class BindBackoff:
    """Failed binds per pod key and the cycle from which each pod is considered again."""

    #: The cycle now running (``next_cycle`` moves it on).
    cycle: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    resume_at: dict[str, int] = field(default_factory=dict)
    #: Pods left out of the cycle now running.
    held: frozenset[str] = frozenset()

    def bind_failed(self, key: str) -> int:
        """Record a failed bind of the pod; the cycles it will sit out from the next."""
        n = self.failures.get(key, 0) + 1
        self.failures[key] = n
        skip = skipped_cycles(n)
        self.resume_at[key] = self.cycle + 1 + skip
        return skip

    def forget(self, key: str) -> None:
        """The pod was bound or is gone: its failures no longer count."""
        self.failures.pop(key, None)
        self.resume_at.pop(key, None)

    def next_cycle(self) -> set[str]:
        """Start the next cycle; the pods whose holding changed (left out now and not
        before, or the other way round)."""
        self.cycle += 1
        held = frozenset(k for k, at in self.resume_at.items() if self.cycle < at)
        changed = set(held ^ self.held)
        self.held = held
        return changed

    def is_held(self, key: str) -> bool:
        return key in self.held
