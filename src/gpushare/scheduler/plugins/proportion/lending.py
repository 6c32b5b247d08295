"""Lending limits: the part of a queue's unused quota that other queues may not use.

A queue resource with ``lending_limit`` lends at most that much of its unused quota; the
rest — its *kept* part, ``quota − lending_limit``, less what the queue itself uses — stays
idle for it, so the queue gets it back at once, without reclaim. Over a tree:

* ``reserve(Q)``, what Q's subtree keeps idle from every queue outside it, per resource:
  the larger of Q's own ``kept − allocated`` (when Q has a lending limit) and the sum of
  its children's reserves. A parent's lending limit so bounds what its whole subtree
  lends outside it, and a child's holds inside its parent too.
* A step of a leaf's job must leave every reserve it is outside of untouched: everything
  allocated, plus the step, plus the reserves of the siblings of the leaf and of each of
  its ancestors, must fit in the cluster. This holds for a step within its queue's quota
  too: while another queue borrows what this one lent, the free capacity may be a third
  queue's kept part, and the quota comes back by reclaim from the borrower instead.

The fair-share division is kept consistent by :mod:`.resource_division`, where a queue's
kept part counts as asked for. Built once per cycle, only when some queue has a lending
limit (never under ``compat: kai``); the capacity checks ask it nothing otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fractions import Fraction

from gpushare.model.quantities import F0, Vec
from gpushare.model.queue import Queue

#: Per queue with a lending limit: its kept part per resource (None: no limit on it).
Kept = tuple[Fraction | None, Fraction | None, Fraction | None]


def kept_of(queue: Queue) -> Kept | None:
    """The queue's kept part per resource, or None when no resource has a lending limit
    (no allocation in that case)."""
    gpu, cpu, mem = queue.gpu.kept, queue.cpu.kept, queue.memory.kept
    if gpu is None and cpu is None and mem is None:
        return None
    return (gpu, cpu, mem)


class LendingLimits:
    """The lending limits of one cycle's queues (see the module's description)."""

    def __init__(self, queues: Mapping[str, Queue], kept: dict[str, Kept],
                 allocated: Callable[[str], Vec], version: Callable[[str], int]) -> None:
        self.queues = queues
        self.kept = kept
        self.allocated = allocated
        #: A queue's usage version: it changes whenever anything in its subtree does, so
        #: a reserve worked out at one version holds until it changes.
        self.version = version
        self._reserves: dict[str, tuple[int, list[Fraction]]] = {}
        self.roots = sorted(n for n, q in queues.items()
                            if q.parent is None or q.parent not in queues)
        #: Queues whose subtree holds a lending limit: only these can reserve anything.
        self.reserving: set[str] = set()
        for name in kept:
            current: str | None = name
            while current is not None and current in queues and current not in self.reserving:
                self.reserving.add(current)
                current = queues[current].parent

    def reserve(self, name: str) -> list[Fraction]:
        """What ``name``'s subtree keeps idle from the queues outside it, per resource
        (not to be changed by the caller)."""
        version = self.version(name)
        hit = self._reserves.get(name)
        if hit is not None and hit[0] == version:
            return hit[1]
        out = [F0, F0, F0]
        for kid in self.queues[name].children:
            if kid in self.reserving:
                sub = self.reserve(kid)
                for i in range(3):
                    out[i] += sub[i]
        kept = self.kept.get(name)
        if kept is not None:
            alloc = self.allocated(name)
            for i in range(3):
                k = kept[i]
                if k is not None and k - alloc[i] > out[i]:
                    out[i] = k - alloc[i]
        self._reserves[name] = (version, out)
        return out

    def withheld(self, chain: list[str]) -> list[Fraction]:
        """What the queues outside a leaf's chain (``chain``: the leaf and its ancestors,
        leaf first) keep idle from it: the reserves of the siblings of every queue on it."""
        out = [F0, F0, F0]
        for name in chain:
            parent = self.queues[name].parent
            siblings = self.roots if parent is None or parent not in self.queues \
                else self.queues[parent].children
            for other in siblings:
                if other != name and other in self.reserving:
                    sub = self.reserve(other)
                    for i in range(3):
                        out[i] += sub[i]
        return out

    def refusal(self, chain: list[str], capacity: Vec,
                request: Vec) -> tuple[int, Fraction, Fraction] | None:
        """Whether a step of ``request`` for the leaf first in ``chain`` would use what
        other queues keep idle: None if not, else (resource index, what is left to the
        leaf's queue beyond what is allocated, what is kept idle from it)."""
        withheld = self.withheld(chain)
        if not any(withheld):
            return None
        total = [F0, F0, F0]
        for root in self.roots:
            alloc = self.allocated(root)
            for i in range(3):
                total[i] += alloc[i]
        for i in range(3):
            left = capacity[i] - total[i] - withheld[i]
            if request[i] and withheld[i] > 0 and request[i] > left:
                return (i, left, withheld[i])
        return None
