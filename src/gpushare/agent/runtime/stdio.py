"""A container's stdin and terminal, as ``stdin``, ``stdinOnce`` and ``tty`` ask.

* ``stdin: true``: the container reads a pipe whose write end the agent keeps; ``kubectl
  attach -i`` (and ``kubectl run -i``) write the client's input there. With ``stdinOnce``
  the pipe is closed when the first attached client closes its input or leaves, so the
  container sees the end of its input; without it the pipe stays open for the next client.
* ``tty: true``: the container runs on a pseudo-terminal (its controlling terminal); its
  output, read from the terminal's master side by the run's log writer, is its log; input
  and window size changes from an attached client go to the master.
* neither: stdin is ``/dev/null``, as a kubelet gives it.

The write end lives in the agent: a run adopted by a restarted agent has lost it (its
input has ended) and cannot be attached to with ``-i``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import termios
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class StdioSpec:
    stdin: bool = False
    once: bool = False
    tty: bool = False

    @classmethod
    def of(cls, container: Mapping[str, Any]) -> StdioSpec:
        return cls(bool(container.get("stdin")), bool(container.get("stdinOnce")),
                   bool(container.get("tty")))


@dataclass(slots=True)
class ChildStdio:
    """What a run is started with: its stdin and, with a terminal, stdout/stderr too; and
    the output the log writer reads (the terminal's master), if not the usual pipe."""

    stdin: int | None  # for the child; None: /dev/null
    terminal: int | None  # the pty's slave (stdin, stdout and stderr of the child)
    log_source: int | None  # what the log writer reads instead of a pipe (the master)
    handle: ContainerStdin | None

    def close_child_ends(self) -> None:
        """In the agent once the child has them."""
        for fd in (self.stdin, self.terminal, self.log_source):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)


@dataclass(slots=True)
class ContainerStdin:
    """The agent's end of a container run's input."""

    fd: int
    tty: bool
    once: bool
    closed: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def write(self, data: bytes) -> bool:
        """Write all of `data` (blocking); False once the input is closed or the
        container no longer reads it."""
        with self._lock:
            if self.closed:
                return False
            view = memoryview(data)
            try:
                while view:
                    view = view[os.write(self.fd, view):]
            except OSError:
                self._close()
                return False
            return True

    def resize(self, rows: int, cols: int) -> None:
        if self.tty and rows > 0 and cols > 0:
            with self._lock, contextlib.suppress(OSError):
                if not self.closed:
                    fcntl.ioctl(self.fd, termios.TIOCSWINSZ,
                                struct.pack("HHHH", rows, cols, 0, 0))

    def end_of_input(self) -> None:
        """The client closed its input: the container sees the end of it (a terminal's
        end-of-file character when on a terminal); only with ``stdinOnce``."""
        if not self.once:
            return
        if self.tty:
            self.write(b"\x04")
        with self._lock:
            self._close()

    def detached(self) -> None:
        """The attached client left: with ``stdinOnce`` the input ends for good."""
        if self.once:
            with self._lock:
                self._close()

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        if not self.closed:
            self.closed = True
            with contextlib.suppress(OSError):
                os.close(self.fd)


def open_stdio(spec: StdioSpec) -> ChildStdio:
    """The fds for a new run of a container with `spec`."""
    if spec.tty:
        master, slave = os.openpty()
        reader = os.dup(master)  # the log writer's
        return ChildStdio(None, slave, reader,
                          ContainerStdin(master, tty=True, once=spec.once))
    if spec.stdin:
        read_end, write_end = os.pipe()
        return ChildStdio(read_end, None, None,
                          ContainerStdin(write_end, tty=False, once=spec.once))
    return ChildStdio(None, None, None, None)
