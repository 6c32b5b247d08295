"""Long work on the one event loop, in slices: a request that deletes or serialises
thousands of objects gives the loop back to every other request between slices, so that no
tenant's bulk request holds up another's for more than one slice."""

from __future__ import annotations

import asyncio
import time

#: a slice of work between two turns of the loop (seconds)
DEFAULT_SLICE_S = 0.005


class Slicer:
    """`await slicer.pause()` between units of work: yields the loop once the slice is
    spent. `budget` None never yields (the work runs in one go, as without fairness)."""

    __slots__ = ("_started", "budget", "pauses")

    def __init__(self, budget: float | None = DEFAULT_SLICE_S) -> None:
        self.budget = budget
        self._started = time.perf_counter()
        self.pauses = 0

    async def pause(self) -> None:
        if self.budget is None:
            return
        if time.perf_counter() - self._started >= self.budget:
            await asyncio.sleep(0)
            self.pauses += 1
            self._started = time.perf_counter()
