"""`run_exec` against a client that reads slowly: all of the command's output is written
before the status that ends the stream, however long writing it takes; only an output a
background child holds open after the command exited is cut."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gpushare.agent.endpoint import streams
from gpushare.agent.endpoint.streams import (
    ERROR,
    STDERR,
    STDOUT,
    ExecTarget,
    StreamOptions,
    run_exec,
)


class SlowClient:
    """Channels whose every write takes `delay` (a client behind a slow link): the frames
    in the order they were written."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.frames: list[tuple[int, bytes]] = []
        self._gone = asyncio.Event()

    async def announce(self, opts: StreamOptions) -> None:
        self.frames.append((STDOUT, b""))

    async def write(self, channel: int, data: bytes) -> None:
        await asyncio.sleep(self.delay)
        self.frames.append((channel, data))

    async def events(self) -> AsyncIterator[tuple[int, bytes]]:
        await self._gone.wait()  # the client sends nothing and stays
        return
        yield  # an async generator

    def output(self, channel: int) -> bytes:
        return b"".join(d for c, d in self.frames if c == channel)


def _run(client: SlowClient, script: str, tmp_path: Path) -> None:
    command = [sys.executable, "-c", script]
    target = ExecTarget(argv=command, env=dict(os.environ), cwd=tmp_path)
    asyncio.run(run_exec(client, target, command, StreamOptions()))


def test_output_still_being_written_when_the_command_exits_is_not_cut(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the command ends with its last 64 KiB and more still in the pipe, behind writes that
    # each take longer than the drain time
    monkeypatch.setattr(streams, "_DRAIN_AFTER_EXIT_S", 0.1)
    client = SlowClient(delay=0.2)
    _run(client, "import sys; sys.stdout.buffer.write(b'x' * 300_000); "
                 "sys.stderr.write('done')", tmp_path)
    assert client.output(STDOUT) == b"x" * 300_000
    assert client.output(STDERR) == b"done"
    assert client.frames[-1][0] == ERROR  # the status comes last, after all the output
    assert json.loads(client.frames[-1][1])["status"] == "Success"
    assert [c for c, _ in client.frames].count(ERROR) == 1


def test_an_output_a_background_child_holds_open_is_cut_after_the_command_exits(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streams, "_DRAIN_AFTER_EXIT_S", 0.2)
    client = SlowClient(delay=0)
    script = ("import subprocess, sys; subprocess.Popen(['sleep', '30']); "
              "print('started', flush=True); sys.exit(4)")
    _run(client, script, tmp_path)
    assert client.output(STDOUT) == b"started\n"
    status = json.loads(client.frames[-1][1])
    assert client.frames[-1][0] == ERROR and status["reason"] == "NonZeroExitCode"
    assert status["details"]["causes"][0]["message"] == "4"
