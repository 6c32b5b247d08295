"""What a pod's processes leave behind when no supervisor holds them: the process groups
of a pod directory whose pod is gone, or that an agent started and died before recording.
Found from the pod's state file and the process table, and killed, their GPU work ended
first."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

from gpushare.agent.runtime import process as proc
from gpushare.agent.runtime.logstore import META_DIR

log = logging.getLogger(__name__)

# Called with a pod's process groups before any signal reaches them (gpu `end_gpu_work`:
# nothing by default, MPS `terminate_client` with `--mps-stop terminate-client`).
BeforeSignal = Callable[[list[int]], object]


def _recorded_groups(directory: Path) -> list[proc.ContainerProcess]:
    try:
        state = json.loads((directory / META_DIR / "state.json").read_text())
    except (OSError, ValueError):
        return []
    return [proc.adopt(entry["process"]) for entry in (state.get("containers") or {}).values()
            if (entry or {}).get("process")]


def started_groups(directory: Path) -> set[int]:
    """Process groups of the container wrappers started for this pod directory, read from
    the process table (the wrapper's first argument is its exit file, in the directory).

    An agent killed between starting a process and recording it in the state file leaves
    a process that no state file names: this finds it."""
    marker = proc._WRAPPER.encode()
    prefix = (str(directory / META_DIR) + "/").encode()
    found: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
            if marker not in args:
                continue
            at = args.index(marker) + 1
            if at < len(args) and args[at].startswith(prefix):
                found.add(os.getpgid(int(entry)))
        except (OSError, ValueError):
            continue
    return found


def kill_leftovers(directory: Path, before_signal: BeforeSignal | None = None) -> list[int]:
    """SIGKILL the process groups of a pod directory whose pod no longer exists: those
    its state file records and any other started for it, after `before_signal`."""
    alive = [p.pgid for p in _recorded_groups(directory)
             if p.poll() is None or p.group_alive()]
    groups = [*alive, *sorted(started_groups(directory) - set(alive))]
    return _kill(directory, groups, before_signal, "leftover")


def kill_unrecorded(directory: Path, before_signal: BeforeSignal | None = None) -> list[int]:
    """SIGKILL the process groups started for a pod that its state file does not record
    (so that no restarted agent adopts one and starts another beside it), their GPU work
    ended first."""
    recorded = {p.pgid for p in _recorded_groups(directory)}
    return _kill(directory, sorted(started_groups(directory) - recorded), before_signal,
                 "unrecorded")


def _kill(directory: Path, groups: list[int], before_signal: BeforeSignal | None,
          what: str) -> list[int]:
    """`before_signal` (its failure logged: the groups must end all the same), then
    SIGKILL to each group."""
    if before_signal is not None and groups:
        try:
            before_signal(groups)
        except Exception:
            log.exception("%s: ending the GPU work of %s processes failed", directory, what)
    for pgid in groups:
        proc.kill_group(pgid)
    return groups
