"""`gpushare simulate scenario --plot`: a real PNG (and SVG) of allocation per queue."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image

SCENARIO = Path(__file__).resolve().parents[1] / (
    "scenarios/seed/002-teams-come-back-and-reclaim-kai.yaml")


def _simulate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpushare.cli.main", "simulate", "scenario",
                           *args], capture_output=True, text=True, timeout=120)


def test_plot_writes_a_png_with_a_line_per_queue(tmp_path):
    out = tmp_path / "alloc.png"
    done = _simulate(str(SCENARIO), "--plot", str(out))
    assert done.returncode == 0, done.stderr
    image = Image.open(out)
    assert image.format == "PNG"
    assert image.size[0] >= 600 and image.size[1] >= 400
    pixels = np.asarray(image.convert("RGB")).reshape(-1, 3)
    not_white = (pixels < 240).any(axis=1).mean()
    assert not_white > 0.03, f"only {not_white:.1%} of the image is drawn on"
    # Four queues in four colours (plus black text and grey grid).
    strong = {tuple(p) for p in pixels if max(p) - min(p) > 80}
    hues = {(p[0] // 64, p[1] // 64, p[2] // 64) for p in strong}
    assert len(hues) >= 4, hues


def test_plot_writes_svg_and_refuses_other_suffixes(tmp_path):
    out = tmp_path / "alloc.svg"
    assert _simulate(str(SCENARIO), "--plot", str(out)).returncode == 0
    text = out.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text
    assert "nlp allocated" in text and "vision fair share" in text
    bad = _simulate(str(SCENARIO), "--plot", str(tmp_path / "alloc.jpg"))
    assert bad.returncode == 2
    assert "--plot" in bad.stderr and ".png or .svg" in bad.stderr
    assert not (tmp_path / "alloc.jpg").exists()


def test_several_scenarios_get_one_plot_each(tmp_path):
    folder = SCENARIO.parent
    done = _simulate(str(folder), "--plot", str(tmp_path / "seed.png"))
    assert done.returncode == 0, done.stderr
    written = sorted(p.name for p in tmp_path.glob("seed-*.png"))
    assert len(written) == len(list(folder.glob("*.yaml")))
    assert "seed-seed-teams-come-back-and-reclaim-kai.png" in written


def test_without_matplotlib_plot_fails_naming_the_extra_and_runs_nothing(tmp_path):
    """matplotlib is the `plot` extra: without it, --plot is refused before any scenario
    runs, with the pip command to get it; the same scenario without --plot still runs."""
    blocked = ("import runpy, sys; sys.modules['matplotlib'] = None; sys.argv = sys.argv[1:]; "
               "runpy.run_module('gpushare.cli.main', run_name='__main__')")
    out = tmp_path / "alloc.png"
    wide = {**os.environ, "COLUMNS": "300"}  # typer's error box keeps the message on one line
    done = subprocess.run([sys.executable, "-c", blocked, "gpushare", "simulate", "scenario",
                           str(SCENARIO), "--plot", str(out)],
                          capture_output=True, text=True, timeout=120, env=wide)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "pip install 'gpushare[plot]'" in done.stderr
    assert "ok " not in done.stdout and not out.exists()
    plain = subprocess.run([sys.executable, "-c", blocked, "gpushare", "simulate", "scenario",
                            str(SCENARIO)], capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0 and plain.stdout.startswith("ok "), plain.stderr
