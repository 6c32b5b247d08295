"""Timeline mode's fairness report: each queue's running GPUs against the fair share the
core computed, integrated over the trace (hand-computed on a two-queue trace)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpushare.simulator.timeline import run_timeline
from gpushare.simulator.traces import read_nodes, read_pods

TRACE = Path(__file__).parent / "traces" / "fair_share.jsonl"


def _run(policy: str = "binpack"):
    return run_timeline(read_nodes(TRACE), read_pods(TRACE), policy, "qos")


def test_a_late_queue_waits_for_reclaim_and_the_deficit_is_integrated():
    r = _run()
    fair = r.fair_shares()
    # a: 4 GPUs running and fair over [0, 50), 2 and 2 over [50, 100): means 3 and 3.
    assert fair["a"] == {"allocatedGpus": 3.0, "fairShare": 3.0, "deficitGpus": 0.0,
                         "shortOfFairShare": 0.0, "ratio": 1.0}
    # b: fair share 2 from 50; its pods bind at 60 (pipelined onto a's released GPUs at 50):
    # running 2 × 40 s, deficit 2 × 10 s, short 10 s, over 100 s.
    assert fair["b"] == {"allocatedGpus": 0.8, "fairShare": 1.0, "deficitGpus": 0.2,
                         "shortOfFairShare": 0.1, "ratio": 0.8}
    assert r.jain_index() == pytest.approx(1.8 ** 2 / (2 * (1 + 0.64)))
    waits = r.waits()
    assert waits["b"]["p50"] == 10.0 and waits["a"]["evicted"] == 2
    # Evicted pods ran: they are neither counted twice nor "never placed".
    assert r.placed == r.total == 7 and not any(w["unplaced"] for w in waits.values())


def test_timeline_json_and_text_carry_the_fairness(tmp_path):
    base = [sys.executable, "-m", "gpushare.cli.main", "simulate", "trace", "--nodes",
            str(TRACE), "--pods", str(TRACE), "--mode", "timeline", "--policy", "binpack"]
    out = subprocess.run([*base, "--json"], capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.splitlines()[-1])
    assert summary["fairShare"]["b"]["deficitGpus"] == 0.2
    assert summary["jainIndex"] == round(1.8 ** 2 / 3.28, 4)
    text = subprocess.run(base, capture_output=True, text=True, timeout=120, check=False)
    assert text.returncode == 0, text.stderr
    assert "fair share 1.00" in text.stdout and "Jain" in text.stdout
