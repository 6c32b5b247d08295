"""An agent killed between starting a container's process and recording it in the pod's
state file: the next agent still finds that process (by its wrapper's exit file, which
lies in the pod directory) and ends it, so that no pod runs twice and no deleted pod
keeps running. Found by the fault run (tests/chaos)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import psutil

from gpushare.agent.runtime import process as proc
from gpushare.agent.runtime.leftovers import kill_leftovers, kill_unrecorded, started_groups
from gpushare.agent.runtime.logstore import META_DIR


def _start(pod_dir: Path, name: str) -> proc.ContainerProcess:
    """Start a wrapper, and wait until its command line shows: the starter returns once
    the old image is gone, a moment before the new one's arguments are readable."""
    meta = pod_dir / META_DIR
    started = proc.start(("sleep", "60"), {"PATH": "/usr/bin:/bin"}, pod_dir,
                         meta / "logs" / f"{name}.log", meta / "exit" / f"{name}.0")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if Path(f"/proc/{started.pid}/cmdline").read_bytes():
            break
        time.sleep(0.005)
    return started


def _gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def _group_gone(pgid: int, timeout: float = 10.0) -> bool:
    """No live process is left in the group (SIGKILL reaches each member in its own time:
    a member forked by the wrapper may still be there, with the wrapper's command line,
    after the leader has died)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = False
        for p in psutil.process_iter(["status"]):
            try:
                if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                    alive = True
                    break
            except (OSError, psutil.Error):
                continue
        if not alive:
            return True
        time.sleep(0.05)
    return False


def _record(pod_dir: Path, name: str, process: proc.ContainerProcess) -> None:
    (pod_dir / META_DIR / "state.json").write_text(json.dumps(
        {"uid": "u", "containers": {name: {"process": process.state()}}}))


def test_a_process_no_state_file_records_is_found_and_killed(tmp_path: Path) -> None:
    pod_dir = tmp_path / "pods" / "default" / "p"
    other_dir = tmp_path / "pods" / "default" / "p2"  # a name that p is a prefix of
    unrecorded = _start(pod_dir, "main")
    neighbour = _start(other_dir, "main")
    try:
        assert started_groups(pod_dir) == {unrecorded.pgid}
        assert kill_leftovers(pod_dir) == [unrecorded.pgid]  # no state.json at all
        assert _gone(unrecorded.pid)
        assert neighbour.poll() is None  # the other pod's process is left alone
    finally:
        proc.kill_group(neighbour.pgid)
        proc.kill_group(unrecorded.pgid)


def test_a_live_pods_unrecorded_process_is_killed_its_recorded_one_kept(
        tmp_path: Path) -> None:
    pod_dir = tmp_path / "pods" / "default" / "p"
    recorded = _start(pod_dir, "main")
    _record(pod_dir, "main", recorded)
    extra = _start(pod_dir, "side")  # started, then the agent died before saving
    try:
        assert kill_unrecorded(pod_dir) == [extra.pgid]
        assert _gone(extra.pid) and _group_gone(extra.pgid)
        assert recorded.poll() is None
        assert kill_unrecorded(pod_dir) == []
    finally:
        proc.kill_group(recorded.pgid)
        proc.kill_group(extra.pgid)
