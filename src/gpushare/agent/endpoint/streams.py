"""`exec` and `attach` over Kubernetes' WebSocket channel protocol (`v4`/`v5.channel.k8s.io`).

Every message starts with a channel byte: 0 stdin, 1 stdout, 2 stderr, 3 error (one
`metav1.Status` JSON when the command ends: Success, or NonZeroExitCode with the exit code
as a cause, which kubectl turns into its own exit code), 4 terminal resize (`{"Width": w,
"Height": h}`). `v5` adds channel 255, "close": its one data byte names a channel the
client will not write again (stdin at EOF, so `tar` in `kubectl cp` ends).

The command runs as a process of the pod: the container's environment, working directory
and sandbox (`ExecTarget`, from the agent), in a session of its own; with a TTY on a
pseudo-terminal. When the client goes away the process group is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import signal
import struct
import subprocess
import termios
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from gpushare.agent.endpoint.wsconn import WsConn
from gpushare.agent.runtime.stdio import ContainerStdin

STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
V5, V4 = "v5.channel.k8s.io", "v4.channel.k8s.io"
CHANNEL_PROTOCOLS = (V5, V4)
_CHUNK = 32768
# once the command has exited, an output that gives nothing for this long is held open by
# a background child and is cut there; output still being read or written is never cut
_DRAIN_AFTER_EXIT_S = 2.0


@dataclass(frozen=True, slots=True)
class StreamOptions:
    stdin: bool = False
    stdout: bool = True
    stderr: bool = True
    tty: bool = False

    @classmethod
    def from_query(cls, query: dict[str, list[str]]) -> StreamOptions:
        def flag(name: str, default: bool) -> bool:
            values = query.get(name)
            if not values:
                return default
            return values[-1].lower() in ("1", "true", "yes")

        tty = flag("tty", False)
        # a kube-apiserver asks a kubelet with input/output/error; clients of the API with
        # stdin/stdout/stderr
        return cls(stdin=flag("stdin", flag("input", False)),
                   stdout=flag("stdout", flag("output", False)),
                   stderr=flag("stderr", flag("error", False)) and not tty, tty=tty)


@dataclass(frozen=True, slots=True)
class ExecTarget:
    """How to start a command in the pod: the full command line, environment and working
    directory (the sandbox's entry already folded in)."""

    argv: list[str]
    env: dict[str, str] = field(hash=False)
    cwd: Path


def success() -> bytes:
    return json.dumps({"metadata": {}, "status": "Success"}).encode()


def failure(message: str, reason: str = "InternalError", code: int = 500,
            exit_code: int | None = None) -> bytes:
    status: dict[str, object] = {"metadata": {}, "status": "Failure", "message": message,
                                 "reason": reason, "code": code}
    if exit_code is not None:
        status["details"] = {"causes": [{"reason": "ExitCode", "message": str(exit_code)}]}
    return json.dumps(status).encode()


def exit_status(command: list[str], code: int) -> bytes:
    if code == 0:
        return success()
    return failure(f"command terminated with non-zero exit code: error executing command "
                   f"{command}, exit code {code}", "NonZeroExitCode", 500, code)


class Channels(Protocol):
    """The streams of one exec or attach, whatever carries them."""

    async def announce(self, opts: StreamOptions) -> None:
        """Tell the client the streams are ready."""

    async def write(self, channel: int, data: bytes) -> None:
        """Output on STDOUT or STDERR, or the final Status on ERROR."""

    def events(self) -> AsyncIterator[tuple[int, bytes]]:
        """(STDIN, data), (CLOSE, b"\\x00") when stdin ends, (RESIZE, json); ends when
        the client goes away."""


class WsChannels:
    """The channel protocol over a WebSocket: one channel byte, then the data."""

    def __init__(self, ws: WsConn) -> None:
        self._ws = ws
        self._v5 = ws.subprotocol == V5

    async def announce(self, opts: StreamOptions) -> None:
        # as the kubelet does: an empty message on the first output channel
        first = STDOUT if opts.stdout else STDERR if opts.stderr else ERROR
        await self._ws.send(bytes([first]))

    async def write(self, channel: int, data: bytes) -> None:
        await self._ws.send(bytes([channel]) + data)

    async def events(self) -> AsyncIterator[tuple[int, bytes]]:
        while (message := await self._ws.recv()) is not None:
            if not message:
                continue
            channel, data = message[0], message[1:]
            if channel == CLOSE and not self._v5:
                continue
            yield channel, data


def _resize(fd: int, data: bytes) -> None:
    try:
        size = json.loads(data)
        rows, cols = int(size.get("Height", 0)), int(size.get("Width", 0))
    except (ValueError, TypeError, AttributeError):
        return
    if rows > 0 and cols > 0:
        with contextlib.suppress(OSError):
            fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _controlling_tty() -> None:  # in the child, after setsid(): fd 0 is the terminal
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class _Process:
    """The command's process and its pipes (or terminal)."""

    def __init__(self, target: ExecTarget, opts: StreamOptions) -> None:
        self.master: int | None = None
        if opts.tty:
            self.master, slave = os.openpty()
            try:
                self.popen = subprocess.Popen(
                    target.argv, stdin=slave, stdout=slave, stderr=slave, env=target.env,
                    cwd=target.cwd, start_new_session=True, preexec_fn=_controlling_tty,
                    close_fds=True)
            finally:
                os.close(slave)
            os.set_blocking(self.master, False)
            return
        pipe, null = subprocess.PIPE, subprocess.DEVNULL
        self.popen = subprocess.Popen(
            target.argv, stdin=pipe if opts.stdin else null,
            stdout=pipe if opts.stdout else null, stderr=pipe if opts.stderr else null,
            env=target.env, cwd=target.cwd, start_new_session=True, close_fds=True)
        for stream in (self.popen.stdin, self.popen.stdout, self.popen.stderr):
            if stream is not None:
                os.set_blocking(stream.fileno(), False)

    def outputs(self) -> Iterator[tuple[int, int]]:
        """(channel, fd) of each output to forward."""
        if self.master is not None:
            yield STDOUT, self.master
            return
        if self.popen.stdout is not None:
            yield STDOUT, self.popen.stdout.fileno()
        if self.popen.stderr is not None:
            yield STDERR, self.popen.stderr.fileno()

    def _stdin_fd(self) -> int | None:
        if self.master is not None:
            return self.master
        return self.popen.stdin.fileno() if self.popen.stdin is not None else None

    async def write_stdin(self, data: bytes) -> None:
        """Write without blocking the server's loop: a command that does not read its
        input only holds up its own stream."""
        fd = self._stdin_fd()
        if fd is None:
            return
        loop = asyncio.get_running_loop()
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(fd, view):]
            except BlockingIOError:
                writable = asyncio.Event()
                loop.add_writer(fd, writable.set)
                try:
                    await writable.wait()
                finally:
                    loop.remove_writer(fd)
            except OSError:
                return

    async def close_stdin(self) -> None:
        if self.master is not None:
            await self.write_stdin(b"\x04")  # end of input on a terminal: ^D
        elif self.popen.stdin is not None:
            with contextlib.suppress(OSError):
                self.popen.stdin.close()

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)

    def close(self) -> None:
        if self.master is not None:
            with contextlib.suppress(OSError):
                os.close(self.master)
        for stream in (self.popen.stdin, self.popen.stdout, self.popen.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


@dataclass(slots=True)
class _Output:
    """One output of the command (its fd, forwarded on `channel`) and its pump's wake-up."""

    channel: int
    fd: int
    readable: asyncio.Event = field(default_factory=asyncio.Event)
    exited: bool = False

    def command_exited(self) -> None:
        """From now on the pump waits on a silent output for `_DRAIN_AFTER_EXIT_S` only."""
        self.exited = True
        self.readable.set()  # a wake-up with nothing to read: the pump waits again, timed


async def _pump(ws: Channels, out: _Output) -> None:
    """Forward what `out.fd` gives on its channel until it ends (EOF, or EIO on a terminal),
    or, after the command exited, stays silent for `_DRAIN_AFTER_EXIT_S`."""
    loop = asyncio.get_running_loop()
    loop.add_reader(out.fd, out.readable.set)
    try:
        while True:
            if out.exited:
                try:
                    await asyncio.wait_for(out.readable.wait(), _DRAIN_AFTER_EXIT_S)
                except TimeoutError:
                    return  # a background child holds the output open
            else:
                await out.readable.wait()
            out.readable.clear()
            try:
                data = os.read(out.fd, _CHUNK)
            except BlockingIOError:
                continue
            except OSError:
                return
            if not data:
                return
            await ws.write(out.channel, data)
    finally:
        loop.remove_reader(out.fd)


async def _read_client(ws: Channels, process: _Process) -> None:
    """Stdin, resizes and close signals from the client; returns when it goes away."""
    async for channel, data in ws.events():
        if channel == STDIN:
            if data:
                await process.write_stdin(data)
        elif channel == RESIZE and process.master is not None:
            _resize(process.master, data)
        elif channel == CLOSE and data[:1] == bytes([STDIN]):
            await process.close_stdin()


async def run_exec(ws: Channels, target: ExecTarget, command: list[str],
                   opts: StreamOptions) -> None:
    """Run the command and stream it; the error channel carries how it ended."""
    loop = asyncio.get_running_loop()
    try:
        process = _Process(target, opts)
    except OSError as exc:
        await ws.write(ERROR, failure(
            f"error executing command in container: failed to exec in container: "
            f"exec: {command[0]!r}: {exc.strerror or exc}"))
        return
    outputs = [_Output(channel, fd) for channel, fd in process.outputs()]
    pumps: list[asyncio.Future[None]] = []
    client: asyncio.Future[None] | None = None
    try:
        await ws.announce(opts)
        pumps = [asyncio.ensure_future(_pump(ws, out)) for out in outputs]
        client = asyncio.ensure_future(_read_client(ws, process))
        waiter: asyncio.Future[int] = loop.run_in_executor(None, process.popen.wait)
        done, _ = await asyncio.wait([waiter, client],  # type: ignore[type-var]
                                     return_when=asyncio.FIRST_COMPLETED)
        if waiter not in done:  # the client left: end the command
            process.kill()
            await waiter
            return
        code = process.popen.returncode
        for out in outputs:
            out.command_exited()
        # every output frame is written before the status that ends the stream
        await asyncio.gather(*pumps)
        await ws.write(ERROR, exit_status(command, 128 - code if code < 0 else code))
    finally:
        if client is not None:
            client.cancel()
        for pump in pumps:
            pump.cancel()
        # the pumps take their fds off the loop before the fds are closed (and reused)
        await asyncio.gather(*pumps, return_exceptions=True)
        process.kill()
        process.close()


async def run_attach(ws: Channels, follow: Callable[[Callable[[], bool]], Iterator[bytes]],
                     opts: StreamOptions, stdin: ContainerStdin | None = None) -> None:
    """Stream the running container's output (its log as it grows) until the run ends or
    the client leaves; `follow(should_stop)` gives the new output. With ``-i`` the
    client's input goes to the container's `stdin` (refused when it has none)."""
    if opts.stdin and stdin is None:
        await ws.write(ERROR, failure(
            "the container has no open stdin (it needs stdin: true, and a stdinOnce input "
            "is closed after its first client); attach without -i", "BadRequest", 400))
        return
    await ws.announce(opts)
    loop = asyncio.get_running_loop()
    leaving = threading.Event()
    chunks = follow(leaving.is_set)
    client = asyncio.ensure_future(
        _feed_stdin(ws, stdin) if opts.stdin and stdin is not None else _drain_client(ws))
    try:
        while True:
            nxt: asyncio.Future[bytes | None] = loop.run_in_executor(None, next, chunks, None)
            done, _ = await asyncio.wait([nxt, client],  # type: ignore[type-var]
                                         return_when=asyncio.FIRST_COMPLETED)
            if nxt not in done:
                return  # the client left
            chunk = nxt.result()
            if chunk is None:
                break
            if opts.stdout:
                await ws.write(STDOUT, chunk)
        await ws.write(ERROR, success())
    finally:
        leaving.set()
        client.cancel()
        if opts.stdin and stdin is not None:
            stdin.detached()


async def _drain_client(ws: Channels) -> None:
    async for _ in ws.events():
        pass


async def _feed_stdin(ws: Channels, stdin: ContainerStdin) -> None:
    """The attached client's input, resizes and close signal, to the container."""
    loop = asyncio.get_running_loop()
    async for channel, data in ws.events():
        if channel == STDIN and data:
            await loop.run_in_executor(None, stdin.write, data)
        elif channel == RESIZE:
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                size = json.loads(data)
                stdin.resize(int(size.get("Height", 0)), int(size.get("Width", 0)))
        elif channel == CLOSE and data[:1] == bytes([STDIN]):
            stdin.end_of_input()
