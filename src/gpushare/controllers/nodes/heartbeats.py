"""When the node-lifecycle controller last saw each node's heartbeat move, on its own clock.

An agent's timestamps (`Ready.lastHeartbeatTime`, the Lease's `renewTime`) are written with
the agent's clock. Comparing them with the controller's wall clock makes a node whose clock
runs behind look dead while it heartbeats, and one whose clock runs ahead look alive for as
long as the skew after it died. As Kubernetes' node-lifecycle controller, freshness is
judged by when *this* controller saw the heartbeat change (its monotonic clock): the
agent's stamps only say whether something changed. A node seen for the first time gets
the whole grace period from that moment.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any


def signature(node: dict[str, Any], lease: dict[str, Any] | None) -> tuple[Any, ...]:
    """What changes with every heartbeat: the Ready condition's stamp and the Lease's."""
    ready = next((c for c in (node.get("status") or {}).get("conditions") or []
                  if isinstance(c, dict) and c.get("type") == "Ready"), {})
    lease_spec = (lease or {}).get("spec") or {}
    return (ready.get("lastHeartbeatTime"), ready.get("status"),
            lease_spec.get("renewTime"), lease_spec.get("holderIdentity"))


@dataclass
class HeartbeatObserver:
    """Per node: the last heartbeat signature seen and when (the observer's clock)."""

    clock: Callable[[], float] = time.monotonic
    _seen: dict[str, tuple[tuple[Any, ...], float]] = field(default_factory=dict)

    def age(self, name: str, node: dict[str, Any], lease: dict[str, Any] | None) -> float:
        """Seconds since this observer saw the node's heartbeat change (0 when it just did
        or the node is new to it)."""
        now = self.clock()
        sig = signature(node, lease)
        known = self._seen.get(name)
        if known is None or known[0] != sig:
            self._seen[name] = (sig, now)
            return 0.0
        return now - known[1]

    def keep_only(self, names: Iterable[str]) -> None:
        """Forget nodes that are gone."""
        present = set(names)
        for name in [n for n in self._seen if n not in present]:
            del self._seen[name]
