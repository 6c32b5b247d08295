"""Long replays show their progress on stderr and keep stdout for the results."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

from gpushare.simulator.fill import run_fill
from gpushare.simulator.timeline import run_timeline
from gpushare.simulator.traces import read_nodes, read_pods

PODS = 120


def _trace(tmp_path: Path) -> Path:
    """Two 8-GPU nodes and PODS one-GPU pods arriving one a second, each for 30 s."""
    lines = [{"kind": "Node", "name": f"n{i}", "cpuMillis": 64000, "memoryMiB": 262144,
              "gpus": 8, "gpuProduct": "A100"} for i in range(2)]
    lines += [{"kind": "Pod", "name": f"p{i}", "cpuMillis": 1000, "memoryMiB": 1024,
               "gpus": 1, "queue": "ab"[i % 2], "createdAt": i, "deletedAt": i + 30}
              for i in range(PODS)]
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_the_replays_report_progress_up_to_their_total(tmp_path):
    trace = _trace(tmp_path)
    nodes, pods = read_nodes(trace), read_pods(trace)
    told: list[tuple[int, int]] = []
    run_timeline(nodes, pods, "binpack", progress=lambda done, total: told.append((done, total)))
    assert told[-1] == (2 * PODS, 2 * PODS)  # every arrival and every departure
    assert [d for d, _ in told] == sorted({d for d, _ in told})  # strictly forward
    filled: list[tuple[int, int]] = []
    result = run_fill(nodes, pods, "binpack", 42, progress=lambda d, t: filled.append((d, t)))
    assert filled[-1] == (len(result.steps), len(result.steps))


def _command(trace: Path) -> list[str]:
    return [sys.executable, "-m", "gpushare.cli.main", "simulate", "trace", "--nodes",
            str(trace), "--pods", str(trace), "--mode", "timeline", "--policy", "binpack",
            "--policy", "spread", "--json"]


def _only_json(stdout: str) -> list[dict]:
    lines = stdout.splitlines()
    assert len(lines) == 2
    return [json.loads(line) for line in lines]


def test_piped_stderr_gets_the_finished_bars_and_stdout_only_json(tmp_path):
    out = subprocess.run(_command(_trace(tmp_path)), capture_output=True, text=True,
                         timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    assert [s["policy"] for s in _only_json(out.stdout)] == ["binpack", "spread"]
    for policy in ("binpack", "spread"):
        line = next(x for x in out.stderr.splitlines() if f"timeline {policy}" in x)
        assert f"{2 * PODS}/{2 * PODS}" in line and "100%" in line


def test_a_terminal_on_stderr_gets_live_bars(tmp_path):
    """stderr on a pseudo-terminal: rich draws live (cursor control codes) and ends at the
    total; stdout, a pipe, still carries nothing but the JSON lines."""
    leader, follower = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(_command(_trace(tmp_path)), stdout=subprocess.PIPE,
                            stderr=follower, env=env)
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal's other end closed: the process is done with it
            break
        if not chunk:
            break
        seen += chunk
    stdout, _ = proc.communicate(timeout=300)
    os.close(leader)
    assert proc.returncode == 0, seen.decode(errors="replace")
    _only_json(stdout.decode())
    terminal = seen.decode(errors="replace")
    assert "\x1b[" in terminal  # drawn in place, not printed once
    assert f"{2 * PODS}/{2 * PODS}" in terminal and "100%" in terminal
    assert "timeline spread" in terminal
