"""What the agent tests ask of the machine's process table."""

from __future__ import annotations

import os

import psutil


def gone(pid: int) -> bool:
    """The process has exited (a zombie awaiting its parent counts as gone)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def processes_named(name: str, pgid: int) -> list[int]:
    """PIDs of processes called `name` in process group `pgid` (others may come and go)."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.name() == name and os.getpgid(p.pid) == pgid:
                found.append(p.pid)
        except (psutil.Error, ProcessLookupError, PermissionError):
            continue
    return found
