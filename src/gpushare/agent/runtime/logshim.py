"""The container log writer: reads a run's stdout and stderr from a pipe and writes the log
file, rotated as a kubelet rotates container logs.

It is a process of its own (``python -m gpushare.agent.runtime.logshim``), started by the
agent beside each container run, in a session of its own and outside the pod's cgroups, as
a container runtime's shim is: the container never holds the log file, and the shim
outlives an agent that stops or dies, so an adopted run keeps its logs. It ends when the
last writer of the pipe (the run and anything it left behind) closes it.

Files, for run *n* of a container (``.gpushare/logs/<container>/``):

* ``n.log``: what the run wrote, newest part; never more than ``max_size`` bytes;
* ``n.log.1`` … ``n.log.<max_files-1>``: the older parts, ``.1`` the most recent; the
  oldest goes when one more is needed, so the run never keeps more than
  ``max_size × max_files`` bytes of log (the kubelet's ``containerLogMaxSize`` 10 MiB and
  ``containerLogMaxFiles`` 5 by default);
* ``n.ts``: "offset epoch_ns" lines for ``n.log`` (the time each chunk was read, for
  ``--timestamps`` and ``--since``), started afresh with each rotation;
* runs before *n - 1* lose their files when run *n* starts (``--previous`` is *n - 1*).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

CHUNK = 64 * 1024
DEFAULT_MAX_SIZE = 10 * 1024 * 1024
DEFAULT_MAX_FILES = 5


@dataclass(frozen=True, slots=True)
class LogLimits:
    """The kubelet's ``containerLogMaxSize`` and ``containerLogMaxFiles``."""

    max_size: int = DEFAULT_MAX_SIZE
    max_files: int = DEFAULT_MAX_FILES

    def __post_init__(self) -> None:
        if self.max_size < 1024:
            raise ValueError(f"containerLogMaxSize: {self.max_size} must be at least 1024")
        if self.max_files < 2:
            raise ValueError(f"containerLogMaxFiles: {self.max_files} must be at least 2")

    @property
    def cap(self) -> int:
        """The most bytes one run's log takes on disk."""
        return self.max_size * self.max_files


def rotated(log: Path, k: int) -> Path:
    return log.with_name(f"{log.name}.{k}")


def index_of(log: Path) -> Path:
    return log.with_suffix(".ts")


class RotatingLog:
    """Appends to ``log``, rotating before it would pass ``max_size``."""

    def __init__(self, log: Path, limits: LogLimits) -> None:
        self.log = log
        self.limits = limits
        self._fd = os.open(log, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o640)
        self._size = os.fstat(self._fd).st_size
        self._index = os.open(index_of(log), os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o640)

    def write(self, data: bytes, now_ns: int | None = None) -> None:
        stamp = time.time_ns() if now_ns is None else now_ns
        while data:
            room = self.limits.max_size - self._size
            if room <= 0:
                self._rotate()
                continue
            part, data = data[:room], data[room:]
            _write_all(self._fd, part)
            self._size += len(part)
            _write_all(self._index, f"{self._size} {stamp}\n".encode())

    def _rotate(self) -> None:
        os.close(self._fd)
        os.close(self._index)
        oldest = self.limits.max_files - 1
        with contextlib.suppress(FileNotFoundError):
            rotated(self.log, oldest).unlink()
        for k in range(oldest - 1, 0, -1):
            with contextlib.suppress(FileNotFoundError):
                rotated(self.log, k).replace(rotated(self.log, k + 1))
        self.log.replace(rotated(self.log, 1))
        self._fd = os.open(self.log, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_APPEND, 0o640)
        self._index = os.open(index_of(self.log),
                              os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_APPEND, 0o640)
        self._size = 0

    def close(self) -> None:
        for fd in (self._fd, self._index):
            with contextlib.suppress(OSError):
                os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def forget_old_runs(log: Path) -> None:
    """Remove the files of runs before the previous one (``<k>.log*``, ``<k>.ts``)."""
    if not log.stem.isdigit():
        return
    keep = {int(log.stem), int(log.stem) - 1}
    for path in log.parent.iterdir():
        run = path.name.split(".", 1)[0]
        if run.isdigit() and int(run) not in keep:
            with contextlib.suppress(OSError):
                path.unlink()


def pump(source: int, out: RotatingLog) -> None:
    """Copy `source` into the log until every writer has closed it."""
    while True:
        try:
            data = os.read(source, CHUNK)
        except InterruptedError:
            continue
        except OSError as exc:  # a terminal whose last user closed it: the end
            if exc.errno == errno.EIO:
                return
            raise
        if not data:
            return
        out.write(data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpushare-logshim")
    parser.add_argument("log", type=Path)
    parser.add_argument("--max-size", type=int, default=DEFAULT_MAX_SIZE)
    parser.add_argument("--max-files", type=int, default=DEFAULT_MAX_FILES)
    args = parser.parse_args(argv)
    limits = LogLimits(args.max_size, args.max_files)
    args.log.parent.mkdir(parents=True, exist_ok=True)
    forget_old_runs(args.log)
    out = RotatingLog(args.log, limits)
    try:
        pump(sys.stdin.fileno(), out)
    finally:
        out.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
