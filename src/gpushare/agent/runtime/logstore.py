"""Per-container log files in the pod directory, and reading them the way `kubectl logs` asks.

A container's stdout and stderr are a pipe read by the run's log writer
(`runtime.logshim`), which writes one file per run (`.gpushare/logs/<container>/<restart>.log`)
and rotates it at the kubelet's size, keeping the older parts as `<restart>.log.1`... Line
timestamps come from a side index (`<restart>.ts`: "offset epoch_ns" lines) that the writer
appends as it writes; reads serve the current file, as a kubelet's do, and a follow goes on
in the new file when the writer rotates.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from gpushare.api.timefmt import rfc3339_nano

META_DIR = ".gpushare"


@dataclass(frozen=True, slots=True)
class LogRequest:
    namespace: str
    pod: str
    container: str
    follow: bool = False
    tail_lines: int | None = None
    timestamps: bool = False
    previous: bool = False
    since_seconds: int | None = None
    limit_bytes: int | None = None


class LogNotFound(LookupError):
    pass


def pods_root(data_dir: Path) -> Path:
    return data_dir / "pods"


def pod_dir(data_dir: Path, namespace: str, name: str) -> Path:
    return pods_root(data_dir) / namespace / name


def container_log_dir(pod_directory: Path, container: str) -> Path:
    return pod_directory / META_DIR / "logs" / container


def log_path(pod_directory: Path, container: str, run: int) -> Path:
    return container_log_dir(pod_directory, container) / f"{run}.log"


def runs_of(pod_directory: Path, container: str) -> list[int]:
    directory = container_log_dir(pod_directory, container)
    if not directory.is_dir():
        return []
    return sorted(int(p.stem) for p in directory.glob("*.log") if p.stem.isdigit())


class TimestampIndex:
    """Appends "offset epoch_ns" whenever a log file is seen larger than before."""

    __slots__ = ("_index", "_log", "_size")

    def __init__(self, log: Path) -> None:
        self._log = log
        self._index = log.with_suffix(".ts")
        self._size = self._last_indexed()

    def _last_indexed(self) -> int:
        try:
            lines = self._index.read_text().splitlines()
        except FileNotFoundError:
            return 0
        return int(lines[-1].split()[0]) if lines else 0

    def observe(self, now_ns: int | None = None) -> None:
        try:
            size = self._log.stat().st_size
        except FileNotFoundError:
            return
        if size > self._size:
            stamp = now_ns if now_ns is not None else time.time_ns()
            with self._index.open("a") as f:
                f.write(f"{size} {stamp}\n")
            self._size = size


def _load_index(log: Path) -> list[tuple[int, int]]:
    try:
        text = log.with_suffix(".ts").read_text()
    except FileNotFoundError:
        return []
    entries = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            entries.append((int(parts[0]), int(parts[1])))
    return entries


def _stamp_for(end_offset: int, index: list[tuple[int, int]], fallback_ns: int) -> int:
    for offset, stamp in index:
        if offset >= end_offset:
            return stamp
    return fallback_ns


def select_log(pod_directory: Path, request: LogRequest) -> Path:
    runs = runs_of(pod_directory, request.container)
    if not runs:
        raise LogNotFound(
            f'container "{request.container}" in pod "{request.pod}" has no logs (yet)'
        )
    if request.previous:
        if len(runs) < 2:
            raise LogNotFound(
                f'previous terminated container "{request.container}" in pod '
                f'"{request.pod}" not found'
            )
        return log_path(pod_directory, request.container, runs[-2])
    return log_path(pod_directory, request.container, runs[-1])


def _format(lines: list[tuple[bytes, int]], index: list[tuple[int, int]], stamps: bool) -> bytes:
    if not stamps:
        return b"".join(line for line, _ in lines)
    now = time.time_ns()
    return b"".join(
        rfc3339_nano(_stamp_for(end, index, now)).encode() + b" " + line for line, end in lines
    )


def _split_lines(data: bytes, base: int) -> tuple[list[tuple[bytes, int]], int]:
    """Complete lines with their end offsets, and how many bytes they covered."""
    lines: list[tuple[bytes, int]] = []
    start = 0
    while True:
        nl = data.find(b"\n", start)
        if nl == -1:
            break
        lines.append((data[start : nl + 1], base + nl + 1))
        start = nl + 1
    return lines, start


def read_log(path: Path, request: LogRequest) -> tuple[bytes, int]:
    """Everything written so far (a partial last line included), and the offset reached."""
    data = path.read_bytes()
    lines, used = _split_lines(data, 0)
    if used < len(data):
        lines.append((data[used:], len(data)))
    index = _load_index(path) if request.timestamps or request.since_seconds else []
    if request.since_seconds is not None:
        now = time.time_ns()
        cutoff = now - request.since_seconds * 1_000_000_000
        lines = [(line, end) for line, end in lines if _stamp_for(end, index, now) >= cutoff]
    if request.tail_lines is not None:
        lines = lines[-request.tail_lines :] if request.tail_lines > 0 else []
    body = _format(lines, index, request.timestamps)
    if request.limit_bytes is not None:
        body = body[: request.limit_bytes]
    return body, len(data)


def follow_log(
    path: Path,
    request: LogRequest,
    still_running: Callable[[], bool],
    poll_seconds: float = 0.1,
    should_stop: Callable[[], bool] | None = None,
) -> Iterator[bytes]:
    """`kubectl logs -f`: the selected part first, then new lines until the run ends."""
    head, offset = read_log(path, request)
    budget = request.limit_bytes
    # a partial last line was sent as is; continue right after it
    if head:
        yield head
    if budget is not None:
        budget -= len(head)
    inode = _inode(path)
    carry = b""  # the start of a line the writer left in the file it rotated away
    while budget is None or budget > 0:
        running = still_running()
        now_inode = _inode(path)
        if now_inode is not None and inode is not None and now_inode != inode:
            # rotated: finish the old file (now `<name>.1`), go on at the new one's start
            old = path.with_name(path.name + ".1")
            if _inode(old) == inode:
                carry += _read_range(old, offset, None)
            inode, offset = now_inode, 0
        size = path.stat().st_size if path.exists() else offset
        if size > offset or carry:
            data = carry + _read_range(path, offset, size)
            base = offset - len(carry)
            lines, used = _split_lines(data, base)
            if not running and used < len(data):
                lines.append((data[used:], base + len(data)))
                used = len(data)
            if lines:
                index = _load_index(path) if request.timestamps else []
                chunk = _format(lines, index, request.timestamps)
                if budget is not None:
                    chunk = chunk[:budget]
                    budget -= len(chunk)
                yield chunk
            held = data[used:]  # an incomplete last line: read again next time
            if len(held) > size - offset:
                carry, offset = held, size
            else:
                carry, offset = b"", size - len(held)
        elif not running:
            return
        if should_stop is not None and should_stop():
            return
        time.sleep(poll_seconds)


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except OSError:
        return None


def _read_range(path: Path, start: int, end: int | None) -> bytes:
    try:
        with path.open("rb") as f:
            f.seek(start)
            return f.read() if end is None else f.read(max(end - start, 0))
    except OSError:
        return b""


def ensure_log_file(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644)
    os.close(fd)
