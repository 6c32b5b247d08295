"""Every placement strategy a config may name, in one literal table.

The config names one strategy for GPU pods and one for CPU-only pods (``placement: {gpu:
binpack, cpu: spread}``); :func:`placement_strategy` looks the name up here. A new strategy
is one more entry of :data:`PLACEMENT_STRATEGIES` (nothing registers itself on import), and
the scenario reader offers exactly these names.
"""

from __future__ import annotations

from gpushare.scheduler.frag_placement import FGD, FRAGMENTATION
from gpushare.scheduler.nodeplacement import BINPACK, SPREAD, PlacementStrategy

PLACEMENT_STRATEGIES: dict[str, PlacementStrategy] = {
    "binpack": BINPACK,
    "spread": SPREAD,
    "fgd": FGD,
    "fragmentation": FRAGMENTATION,
}


def placement_strategy(name: str) -> PlacementStrategy:
    """The strategy a config names; a ``ValueError`` listing the known names otherwise."""
    try:
        return PLACEMENT_STRATEGIES[name]
    except KeyError:
        known = ", ".join(sorted(PLACEMENT_STRATEGIES))
        raise ValueError(f"unknown placement strategy {name!r} (known: {known})") from None


def placement_strategy_names() -> tuple[str, ...]:
    return tuple(sorted(PLACEMENT_STRATEGIES))
