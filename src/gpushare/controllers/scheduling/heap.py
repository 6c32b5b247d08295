"""Keeping full passes of Python's cycle collector out of scheduling cycles.

The scheduler holds every node, queue, job and pod of the cluster: about 600,000 objects
at 4,000 nodes and 140,000 pods. A full pass of the cyclic garbage collector over them
takes about 0.2 s on a small machine, and it lands inside whichever cycle happens to
trigger it. So between cycles the loop collects what the last cycles left behind and moves
the survivors to the permanent generation (``gc.freeze``), which the collector does not
scan: a pass that runs inside a cycle then sees only what was made since.

That collection is skipped while fewer than ``min_allocated`` container objects were
allocated (net, by every thread) since the last one, and within ``min_interval`` seconds
of it: a pass inside a cycle then still sees only what a fraction of a second made, and
the many small cycles of a busy loop do not each pay for a collection of their own.

Objects die mostly by reference counting, which freezing does not affect; only garbage
caught in reference cycles after it was frozen waits for the periodic full pass, when
everything is unfrozen and collected once.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

#: Net container allocations since the last collection that make the next one worth it.
MIN_ALLOCATED = 20_000
#: Seconds between two collections at least (unless the periodic full pass is due).
MIN_INTERVAL = 0.25


def allocated_since_collection() -> int:
    """About how many container objects were allocated (net of those freed) since the
    last full collection, from the collector's generation counters."""
    young, middle, old = gc.get_count()
    first, second, _ = gc.get_threshold()
    return young + middle * first + old * first * second


class HeapKeeper:
    """Call :meth:`between_cycles` after each cycle (outside its latency)."""

    def __init__(self, full_every: int = 600, min_allocated: int = MIN_ALLOCATED,
                 min_interval: float = MIN_INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if full_every < 1:
            raise ValueError(f"full_every: must be at least 1, got {full_every}")
        if min_allocated < 0:
            raise ValueError(f"min_allocated: must be at least 0, got {min_allocated}")
        self.full_every = full_every
        self.min_allocated = min_allocated
        self.min_interval = min_interval
        self.clock = clock
        self.collections = 0
        self._last = 0.0
        self._cycles = 0
        self._full_due = False

    def between_cycles(self) -> None:
        self._cycles += 1
        if self._cycles % self.full_every == 0:
            self._full_due = True
        now = self.clock()
        if not self._full_due and self.collections and (
                now - self._last < self.min_interval
                or allocated_since_collection() < self.min_allocated):
            return
        self._last = now
        if self._full_due:
            gc.unfreeze()  # the periodic full pass: frozen garbage in cycles goes too
            self._full_due = False
        gc.collect()
        gc.freeze()
        self.collections += 1
