"""Scenarios that need the eviction actions (consolidation, reclaim, preempt, stale-gang
eviction) which are not complete yet. They are expected to fail, not skipped; remove a
line as soon as its scenario passes. This is the only place such marks come from."""

PENDING_EVICTION_ACTIONS: frozenset[str] = frozenset()
