"""Small plotting helpers for simulator reports (matplotlib, no display needed).

matplotlib is an optional dependency (the ``plot`` extra): it is imported only when a plot
is drawn, and ``pyplot()`` turns its absence into a ``PlotError`` naming the extra.

``line_plot`` draws named series of ``(x, y)`` points into a PNG or SVG file; the format
follows the file's suffix; ``inset`` adds a magnified view of a y range (the 85–100 %
where fill curves part). ``allocation_plot`` draws GPU allocation per queue over the
cycles of a scenario as small multiples, one panel per queue on a shared axis, each
value held as a step until the next cycle (cycles are discrete), with the fair share
each cycle divided as a dark dashed step over it; ``share_bars`` a fair-share
division as bars.
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
    inset: tuple[float, float] | None = None,
) -> Path:
    """Write one line per series; ``diagonal`` adds a dashed y = x guide; ``inset``
    ``(lo, hi)`` adds a second panel magnifying that y range over the x where any series
    is inside it, with the same lines."""
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise PlotError(f"--plot: expected a .png or .svg file name, got {str(path)!r}")
    plt = pyplot()
    if inset is None:
        fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
        axes = [ax]
    else:
        fig, (ax, zoom) = plt.subplots(1, 2, figsize=(11, 4.5), dpi=110,
                                       gridspec_kw={"width_ratios": [3, 2]})
        axes = [ax, zoom]
    try:
        for target in axes:
            _lines(target, series, diagonal)
        if ylim is not None:
            ax.set_ylim(*ylim)
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if len(series) > 1:
            ax.legend(loc="best", fontsize="small")
        if inset is not None:
            _zoom(ax, axes[1], series, inset, xlabel, ylabel)
        fig.tight_layout()
        fig.savefig(path, metadata={"Date": None} if path.suffix.lower() == ".svg" else None)
    finally:
        plt.close(fig)
    return path


def _lines(ax: Any, series: Mapping[str, Sequence[tuple[float, float]]],
           diagonal: bool) -> None:
    for name, points in series.items():
        if points:
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, label=name, linewidth=1.6)
    if diagonal:
        lo = min((p[0] for pts in series.values() for p in pts), default=0)
        hi = max((p[0] for pts in series.values() for p in pts), default=1)
        ax.plot([lo, hi], [lo, hi], linestyle="--", color="grey", linewidth=0.8)
    ax.grid(True, alpha=0.3)


def _zoom(ax: Any, zoom: Any, series: Mapping[str, Sequence[tuple[float, float]]],
          band: tuple[float, float], xlabel: str, ylabel: str) -> None:
    """The second panel: ``band`` of y, over the x where any series is in it; the band
    is shaded on the main panel so the eye finds where it came from."""
    lo, hi = band
    inside = [x for pts in series.values() for x, y in pts if lo <= y <= hi]
    if inside:
        zoom.set_xlim(min(inside), max(inside))
    zoom.set_ylim(lo, hi)
    zoom.set_title(f"{lo:g}–{hi:g} magnified", fontsize="medium")
    zoom.set_xlabel(xlabel)
    zoom.set_ylabel(ylabel)
    ax.axhspan(lo, hi, color="grey", alpha=0.08)


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
    """One panel per queue (shared axes): allocation after each cycle as a solid step
    (``start``: before the first, at cycle 0), the fair share each cycle divided as a
    dark dashed step over it. Steps, because a value holds from one cycle
    to the next; panels, because equal series drawn on one axis hide each other."""
    path = check_path(path)
    names = sorted(set(allocated) | set(fair_share))
    if not names:
        raise PlotError("--plot: nothing to draw (no queues, or no cycles run)")
    plt = pyplot()
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    cols = min(len(names), 3)
    rows = -(-len(names) // cols)
    fig, grid = plt.subplots(rows, cols, figsize=(3.6 * cols + 0.6, 2.6 * rows + 0.8),
                             dpi=110, sharex=True, sharey=True, squeeze=False)
    top = max([0.0, *(v for vs in (*allocated.values(), *fair_share.values()) for v in vs),
               *((start or {}).values())])
    for i, ax in enumerate(grid.flat):
        if i >= len(names):
            ax.set_visible(False)
            continue
        name = names[i]
        _queue_panel(ax, name, colours[i % len(colours)], allocated.get(name, ()),
                     fair_share.get(name, ()), (start or {}).get(name))
        ax.set_ylim(0, top * 1.08 if top > 0 else 1)
        if i % cols == 0:
            ax.set_ylabel(f"allocated ({unit})")
        ax.tick_params(labelbottom=True)
        ax.set_xlabel("cycle")
    fig.suptitle(title)
    return _save(plt, fig, path)


def _queue_panel(ax: Any, name: str, colour: str, values: Sequence[float],
                 fair: Sequence[float], start: float | None) -> None:
    xs = list(range(1, len(values) + 1))
    ys = list(values)
    if start is not None:
        xs, ys = [0, *xs], [start, *ys]
    if ys:
        ax.step(xs, ys, where="post", linewidth=1.8, color=colour, label=f"{name} allocated")
        ax.plot(xs, ys, linestyle="none", marker="o", markersize=2.5, color=colour)
    if fair:  # dark and on top: where it equals the allocation it still shows
        ax.step(range(1, len(fair) + 1), list(fair), where="post", linestyle=(0, (4, 3)),
                linewidth=1.1, color="#222222", zorder=3, label=f"{name} fair share")
    ax.set_title(name, fontsize="medium", color=colour)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize="x-small")


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
