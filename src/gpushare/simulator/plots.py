"""Small plotting helpers for simulator reports (matplotlib, no display needed).

``line_plot`` draws named series of ``(x, y)`` points into a PNG or SVG file; the format
follows the file's suffix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

FORMATS = (".png", ".svg")


class PlotError(ValueError):
    """A plot that cannot be written (bad file name or format)."""


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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
