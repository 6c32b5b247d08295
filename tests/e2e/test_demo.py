"""The README's main job, `gpushare demo`, run as a user runs it."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl")


def test_demo_bursts_then_every_team_reclaims_330m(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "gpushare.cli.main", "demo", "--data-dir", str(tmp_path),
         "--gpus", "1xL40S", "--timeout", "60"],
        capture_output=True, text=True, timeout=240, check=False,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "✓ nlp allocated 990m" in out
    for team in ("nlp", "vision", "recsys"):
        assert f"✓ {team} running with 330m" in out
    assert "evicted by reclaim" in out
    assert "vision step on GPU 0 portion 0.33" in out
