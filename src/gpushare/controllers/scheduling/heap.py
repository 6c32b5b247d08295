"""Keeping full passes of Python's cycle collector out of scheduling cycles.

The scheduler holds every node, queue, job and pod of the cluster: about 600,000 objects
at 4,000 nodes and 140,000 pods. A full pass of the cyclic garbage collector over them
takes about 0.2 s on a small machine, and it lands inside whichever cycle happens to
trigger it. So between cycles the loop collects what the last cycle left behind and moves
the survivors to the permanent generation (``gc.freeze``), which the collector does not
scan: a pass that runs inside a cycle then sees only what that cycle made.

Objects die mostly by reference counting, which freezing does not affect; only garbage
caught in reference cycles after it was frozen waits for the periodic full pass, when
everything is unfrozen and collected once.
"""

from __future__ import annotations

import gc


class HeapKeeper:
    """Call :meth:`between_cycles` after each cycle (outside its latency)."""

    def __init__(self, full_every: int = 600) -> None:
        if full_every < 1:
            raise ValueError(f"full_every: must be at least 1, got {full_every}")
        self.full_every = full_every
        self._cycles = 0

    def between_cycles(self) -> None:
        self._cycles += 1
        if self._cycles % self.full_every == 0:
            gc.unfreeze()  # the periodic full pass: frozen garbage in cycles goes too
        gc.collect()
        gc.freeze()
