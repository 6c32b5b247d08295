"""`gpushare simulate scenario --plot`: a real PNG (and SVG) of allocation per queue."""

from __future__ import annotations

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
