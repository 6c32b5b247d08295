"""Small plotting helpers for simulator reports (matplotlib, no display needed).

matplotlib is an optional dependency (the ``plot`` extra): it is imported only when a plot
is drawn, and ``pyplot()`` turns its absence into a ``PlotError`` naming the extra.

``line_plot`` draws named series of ``(x, y)`` points into a PNG or SVG file; the format
follows the file's suffix. ``allocation_plot`` draws GPU allocation per queue over the
cycles of a scenario with each queue's fair share as a dashed line of the same colour;
``share_bars`` a fair-share division as bars.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

FORMATS = (".png", ".svg")


class PlotError(ValueError):
    """A plot that cannot be written (bad file name or format, matplotlib not installed)."""


MISSING = ("--plot: drawing needs matplotlib, which gpushare installs only with its `plot` "
           "extra: pip install 'gpushare[plot]'")


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend, or ``PlotError`` if not installed."""
    try:
        import matplotlib
    except ImportError:
        raise PlotError(MISSING) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def line_plot(
    path: str | Path,
    series: Mapping[str, Sequence[tuple[float, float]]],
    *,
    title: str = "",
    xlabel: str = "",
    ylabel: str = "",
    ylim: tuple[float, float] | None = None,
    diagonal: bool = False,
) -> Path:
    """Write one line per series; ``diagonal`` adds a dashed y = x guide."""
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise PlotError(f"--plot: expected a .png or .svg file name, got {str(path)!r}")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    try:
        for name, points in series.items():
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, label=name, linewidth=1.6)
        if diagonal:
            lo = min((p[0] for pts in series.values() for p in pts), default=0)
            hi = max((p[0] for pts in series.values() for p in pts), default=1)
            ax.plot([lo, hi], [lo, hi], linestyle="--", color="grey", linewidth=0.8)
        if ylim is not None:
            ax.set_ylim(*ylim)
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        if len(series) > 1:
            ax.legend(loc="best", fontsize="small")
        fig.tight_layout()
        fig.savefig(path, metadata={"Date": None} if path.suffix.lower() == ".svg" else None)
    finally:
        plt.close(fig)
    return path


def check_path(path: str | Path) -> Path:
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise PlotError(f"--plot: expected a .png or .svg file name, got {str(path)!r}")
    if not path.parent.is_dir():
        raise PlotError(f"--plot: no such directory {str(path.parent)!r}")
    pyplot()  # before any work: the extra is missing, say so now
    return path


def _figure() -> tuple[Any, Any, Any]:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.8), dpi=110)
    return plt, fig, ax


def _save(plt: Any, fig: Any, path: Path) -> Path:
    try:
        fig.tight_layout()
        # no creation date in SVGs: the same run gives the same file
        fig.savefig(path, metadata={"Date": None} if path.suffix.lower() == ".svg" else None)
    finally:
        plt.close(fig)
    return path


def allocation_plot(
    path: str | Path,
    allocated: Mapping[str, Sequence[float]],
    fair_share: Mapping[str, Sequence[float]],
    *,
    title: str = "",
    unit: str = "GPUs",
    start: Mapping[str, float] | None = None,
) -> Path:
    """Allocation per queue after each cycle (solid, with markers; ``start``: before the
    first, at cycle 0) and the fair share each cycle divided (dashed, same colour)."""
    path = check_path(path)
    plt, fig, ax = _figure()
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    names = sorted(set(allocated) | set(fair_share))
    if not names:
        plt.close(fig)
        raise PlotError("--plot: nothing to draw (no queues, or no cycles run)")
    for i, name in enumerate(names):
        colour = colours[i % len(colours)]
        values = list(allocated.get(name, ()))
        xs = list(range(1, len(values) + 1))
        if start is not None and name in start:
            xs, values = [0, *xs], [start[name], *values]
        if values:
            ax.plot(xs, values, marker="o", markersize=3,
                    linewidth=1.8, color=colour, label=f"{name} allocated")
        fair = fair_share.get(name, ())
        if fair:
            ax.plot(range(1, len(fair) + 1), fair, linestyle="--", linewidth=1.2,
                    color=colour, label=f"{name} fair share")
    ax.set_title(title)
    ax.set_xlabel("cycle")
    ax.set_ylabel(f"allocated ({unit})")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    return _save(plt, fig, path)


def share_bars(path: str | Path, shares: Mapping[str, float], *, title: str = "",
               unit: str = "GPUs") -> Path:
    """A fair-share division (no cycles) as one bar per queue."""
    path = check_path(path)
    if not shares:
        raise PlotError("--plot: nothing to draw (no queues)")
    plt, fig, ax = _figure()
    names = sorted(shares)
    bars = ax.bar(names, [shares[n] for n in names], color="#4a7bd0")
    ax.bar_label(bars, fmt="%.3g", fontsize="small")
    ax.set_title(title)
    ax.set_ylabel(f"fair share ({unit})")
    ax.grid(True, axis="y", alpha=0.3)
    ax.tick_params(axis="x", labelrotation=30)
    return _save(plt, fig, path)
