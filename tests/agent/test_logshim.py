"""The container log writer: rotation, the cap on disk, old runs forgotten."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpushare.agent.runtime.logshim import LogLimits, RotatingLog, forget_old_runs, rotated


def _disk(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.iterdir() if ".log" in p.name)


def test_rotation_keeps_at_most_the_cap_and_the_newest_bytes(tmp_path: Path) -> None:
    log = tmp_path / "0.log"
    limits = LogLimits(max_size=1024, max_files=3)
    out = RotatingLog(log, limits)
    for i in range(1000):
        out.write(f"line {i:04d}\n".encode(), now_ns=i)
    out.close()
    assert log.stat().st_size <= 1024
    assert rotated(log, 1).exists() and rotated(log, 2).exists()
    assert not rotated(log, 3).exists()
    assert _disk(tmp_path) <= limits.cap
    assert log.read_bytes().endswith(b"line 0999\n")
    # .1 holds what came right before the current file
    assert rotated(log, 1).read_bytes() + log.read_bytes() in b"".join(
        f"line {i:04d}\n".encode() for i in range(1000))
    index = log.with_suffix(".ts").read_text().split("\n")
    assert index[-2].split() == [str(log.stat().st_size), "999"]


def test_limits_name_the_setting() -> None:
    with pytest.raises(ValueError, match="containerLogMaxSize"):
        LogLimits(max_size=10)
    with pytest.raises(ValueError, match="containerLogMaxFiles"):
        LogLimits(max_files=1)


def test_the_shim_process_copies_a_pipe_until_every_writer_closes(tmp_path: Path) -> None:
    log = tmp_path / "2.log"
    for old in ("0.log", "0.ts", "0.log.1", "1.log", "1.ts"):
        (tmp_path / old).write_text("old\n")
    read, write = os.pipe()
    shim = subprocess.Popen([sys.executable, "-m", "gpushare.agent.runtime.logshim", str(log),
                             "--max-size", "65536", "--max-files", "2"], stdin=read,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    os.close(read)
    # `yes` writes until it is stopped: the log on disk stays under the cap
    yes = subprocess.Popen(["yes"], stdout=write)
    os.close(write)
    try:
        subprocess.run(["sleep", "1"], check=True)
    finally:
        yes.kill()
        yes.wait()
    assert shim.wait(timeout=20) == 0
    assert _disk(tmp_path) - len("old\n") <= 2 * 65536  # run 1 (the previous) is kept
    assert log.stat().st_size > 0 and rotated(log, 1).stat().st_size == 65536
    assert not (tmp_path / "0.log").exists() and not (tmp_path / "0.log.1").exists()
    assert (tmp_path / "1.log").read_text() == "old\n"


def test_forget_old_runs_ignores_other_names(tmp_path: Path) -> None:
    (tmp_path / "notes").write_text("x")
    (tmp_path / "3.log").write_text("x")
    forget_old_runs(tmp_path / "5.log")
    assert (tmp_path / "notes").exists() and not (tmp_path / "3.log").exists()
