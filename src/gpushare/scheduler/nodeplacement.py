"""Placement strategies: one object per placement rule (binpack, spread, ...).

A strategy supplies everything that differs between placement rules, so that the node
score (``placement.ordered_fits``), the node index's order (``node_index.NodeIndex``), the
GPU order inside a node (``placement.fit_on_node``) and whether consolidation may run all
read the same object instead of testing the rule's name:

* ``scores(figures)``: the placement score (0..9) of each fitting node from its
  ``(free, total)`` figures of the resource that matters (milli-GPUs for a GPU pod, CPU
  millicores for a CPU-only pod), in the order given;
* ``index_key(free, total, name)``: the node's key in the node index; nodes are tried in
  ascending key order, which must be the order of ``scores`` (higher score first), with the
  node name last to break ties;
* ``index_start(need)``: a key below which no node can have ``need`` free (the index skips
  them), or ``None`` when the keys do not sort by free amount;
* ``gpu_order(fill)``: the sort key of a shared GPU already filled ``fill`` milli-GPUs, for
  a fraction choosing among the GPUs of one node (lower first; an entirely free GPU has
  fill 0);
* ``shared_gpus_first``: nodes with a shared GPU the fraction fits on come before all
  others (KAI's ``gpusharingorder``, on under GPU binpack only);
* ``allows_consolidation``: consolidation (moving pods to make room) runs only when both
  the GPU and the CPU strategy allow it.

The config names them (``placement: {gpu: binpack, cpu: spread}``); the table of names is
:data:`~gpushare.scheduler.placement_registry.PLACEMENT_STRATEGIES`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol

#: The highest placement score; other score bands sit above it (see ``placement``).
SCORE_PLACEMENT_MAX = 9

Key = tuple[object, ...]


class PlacementStrategy(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def shared_gpus_first(self) -> bool: ...
    @property
    def allows_consolidation(self) -> bool: ...
    def scores(self, figures: Sequence[tuple[int, int]]) -> list[float]: ...
    def index_key(self, free: int, total: int, name: str) -> Key: ...
    def index_start(self, need: int) -> Key | None: ...
    def gpu_order(self, fill: int) -> int: ...


@dataclass(frozen=True, slots=True)
class Binpack:
    """Least free first: ``9 * (1 - (free - min) / (max - min))`` over the fitting nodes
    that have the resource (all 9 when they are equal); fullest shared GPU first."""

    name: str = "binpack"
    shared_gpus_first: bool = True
    allows_consolidation: bool = True

    def scores(self, figures: Sequence[tuple[int, int]]) -> list[float]:
        with_resource = [free for free, total in figures if total]
        if not with_resource:
            return [0.0] * len(figures)
        lo, hi = min(with_resource), max(with_resource)
        scores = []
        for free, total in figures:
            if total == 0 or hi == 0:
                scores.append(0.0)
            elif lo == hi:
                scores.append(float(SCORE_PLACEMENT_MAX))
            else:
                scores.append(SCORE_PLACEMENT_MAX * (1 - (free - lo) / (hi - lo)))
        return scores

    def index_key(self, free: int, total: int, name: str) -> Key:
        return (free, name)

    def index_start(self, need: int) -> Key | None:
        return (need, "")

    def gpu_order(self, fill: int) -> int:
        return -fill


@dataclass(frozen=True, slots=True)
class Spread:
    """Largest free share first: ``free / total``; emptiest shared GPU first."""

    name: str = "spread"
    shared_gpus_first: bool = False
    allows_consolidation: bool = False

    def scores(self, figures: Sequence[tuple[int, int]]) -> list[float]:
        return [free / total if total else 0.0 for free, total in figures]

    def index_key(self, free: int, total: int, name: str) -> Key:
        if not total:
            return (0, name)
        if total < EXACT_FLOAT_RATIO:
            return (-(free / total), name)
        return (-Fraction(free, total), name)

    def index_start(self, need: int) -> Key | None:
        return None

    def gpu_order(self, fill: int) -> int:
        return fill


#: Below this denominator a float quotient orders ``free / total`` ratios exactly: distinct
#: ratios differ by at least ``1 / total**2`` (more than a float's spacing below 1) and equal
#: ones round to the same float; above it the key is a ``Fraction``.
EXACT_FLOAT_RATIO = 1 << 26


BINPACK = Binpack()
SPREAD = Spread()
