"""The queues' figures as one action's victim search reads them: per queue its quota,
limit, fair share and allocations (:class:`QueueShare`), rebuilt only for queues whose
usage changed, and the cluster's capacity."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from gpushare.model.quantities import as_quantities
from gpushare.scheduler.plugins.proportion.resource_share import QueueShare
from gpushare.scheduler.session import Session

#: Entries kept before the memo starts afresh (memory only: it never changes a result).
_SHARE_CACHE_LIMIT = 50_000


@dataclass(slots=True)
class QueueFigures:
    session: Session
    #: The queues' figures when the current job's search began (what the rules read).
    snapshot: dict[str, QueueShare] = field(default_factory=dict)
    _snapshot_commits: int = -1
    _cache: dict[tuple[Any, ...], QueueShare] = field(default_factory=dict)
    _last: dict[str, QueueShare] = field(default_factory=dict)
    _versions: dict[str, int] = field(default_factory=dict)
    _totals: dict[str, Fraction] | None = None

    def current(self, commits: int) -> dict[str, QueueShare]:
        """The queues' figures now (outside a search), kept as :attr:`snapshot` until the
        action's next commit (``commits`` counts them)."""
        if self._snapshot_commits != commits:
            self.snapshot = self.now()
            self._snapshot_commits = commits
        return self.snapshot

    def now(self) -> dict[str, QueueShare]:
        """The queues' figures now, frozen for the rules while one job is solved (a new
        mapping each time; only queues whose usage changed since the last call are
        looked up again)."""
        state = self.session.state
        usage = state.queue_usage
        known = self._last
        for name in state.queues:
            version = usage[name].version
            if self._versions.get(name) != version or name not in known:
                known[name] = self.share(name)
                self._versions[name] = version
        if len(known) != len(state.queues):
            for name in [n for n in known if n not in state.queues]:
                del known[name]
        return dict(known)

    def share(self, name: str) -> QueueShare:
        """One queue's figures now. Quotas, limits and fair shares do not change during an
        action, so a queue's figures follow from its allocations alone: the same
        allocations give back the very same object (a simulation that puts victims back
        where they were meets the figures, and the comparisons, it already knows)."""
        s = self.session
        usage = s.state.queue_usage[name]
        key = (name, usage.allocated, usage.allocated_np)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        queue = s.state.queues[name]
        shares = s.proportion
        fair, alloc, alloc_np = shares.fair(name), shares.allocated(name), shares.allocated_np(name)
        share = QueueShare(
            name=name,
            parent=queue.parent if queue.parent in s.state.queues else None,
            priority=queue.priority,
            created_at=queue.created_at,
            deserved=as_quantities(shares.quota[name]),
            limit=as_quantities(shares.limit[name]),
            fair_share=as_quantities(fair),
            allocated=as_quantities(alloc),
            allocated_np=as_quantities(alloc_np),
        )
        if len(self._cache) >= _SHARE_CACHE_LIMIT:
            self._cache.clear()  # bounded memory; the figures are recomputed alike
        self._cache[key] = share
        return share

    def branches(self, leaves: Iterator[str]) -> dict[str, QueueShare]:
        """The figures of these leaf queues and their ancestors (all fair order reads)."""
        queues = self.session.state.queues
        out: dict[str, QueueShare] = {}
        for leaf in leaves:
            current: str | None = leaf
            while current is not None and current in queues and current not in out:
                share = out[current] = self.share(current)
                current = share.parent
        return out

    def totals(self) -> dict[str, Fraction]:
        """The cluster's capacity (fixed for the session: one mapping, read-only)."""
        if self._totals is None:
            self._totals = as_quantities(self.session.capacity)
        return self._totals
