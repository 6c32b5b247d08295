"""`exec` and `attach` over a SPDY/3.1 upgrade, as a kube-apiserver asks a kubelet (it
translates kubectl's WebSocket into this): `POST /exec/...` with `Upgrade: SPDY/3.1` and
`X-Stream-Protocol-Version: v4.channel.k8s.io`, answered 101. The client then opens one
stream per channel, named by the `streamtype` header (`error`, `stdin`, `stdout`, `stderr`,
`resize`); the server answers each, waits for those the request asked for, runs the
command (`streams.run_exec`), writes output on the stdout/stderr streams, the final
`Status` on the error stream, and ends them all.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator

from gpushare.agent.endpoint.spdy import (
    FLAG_FIN,
    GOAWAY,
    PING,
    SYN_REPLY,
    SYN_STREAM,
    ByteChannel,
    HeaderCodec,
    SpdyError,
    control_frame,
    data_frame,
    parse_frames,
)
from gpushare.agent.endpoint.streams import (
    CLOSE,
    ERROR,
    RESIZE,
    STDERR,
    STDIN,
    STDOUT,
    StreamOptions,
)

SPDY_CHANNEL_PROTOCOLS = ("v4.channel.k8s.io",)
_NAMES = {"stdin": STDIN, "stdout": STDOUT, "stderr": STDERR, "error": ERROR,
          "resize": RESIZE}
_STREAMS_WAIT_S = 30.0


class StreamsMissing(RuntimeError):
    """The client did not open the streams its request asked for."""


class SpdyChannels:
    """`streams.Channels` over a SPDY session."""

    def __init__(self, conn: ByteChannel, opts: StreamOptions) -> None:
        self._conn = conn
        self._codec = HeaderCodec()
        self._ids: dict[int, int] = {}  # channel -> stream id
        self._channels: dict[int, int] = {}  # stream id -> channel
        self._wanted = {ERROR} | ({STDIN} if opts.stdin else set()) | \
            ({STDOUT} if opts.stdout else set()) | ({STDERR} if opts.stderr else set())
        self._ready = asyncio.Event()
        self._events: asyncio.Queue[tuple[int, bytes] | None] = asyncio.Queue()
        self._lock = asyncio.Lock()
        self._reader = asyncio.ensure_future(self._read())

    async def _send(self, data: bytes) -> None:
        async with self._lock:
            await self._conn.send(data)

    async def _read(self) -> None:
        buffer = bytearray()
        try:
            while (data := await self._conn.recv()) is not None:
                buffer += data
                for frame in parse_frames(buffer):
                    if frame.control and frame.kind == SYN_STREAM:
                        await self._opened(frame.stream, frame.payload[10:])
                    elif frame.control and frame.kind == PING:
                        await self._send(control_frame(PING, 0, frame.payload[:4]))
                    elif frame.control and frame.kind == GOAWAY:
                        return
                    elif not frame.control:
                        channel = self._channels.get(frame.stream)
                        if channel in (STDIN, RESIZE) and frame.payload:
                            await self._events.put((channel, frame.payload))
                        if channel == STDIN and frame.flags & FLAG_FIN:
                            await self._events.put((CLOSE, bytes([STDIN])))
        except (SpdyError, ConnectionError):
            return
        finally:
            await self._events.put(None)

    async def _opened(self, stream: int, block: bytes) -> None:
        headers = self._codec.decode(block)
        await self._send(control_frame(SYN_REPLY, 0, struct.pack(">I", stream) +
                                       self._codec.encode({})))
        channel = _NAMES.get(headers.get("streamtype", ""))
        if channel is None:
            return
        self._ids[channel] = stream
        self._channels[stream] = channel
        if self._wanted <= set(self._ids):
            self._ready.set()

    async def announce(self, opts: StreamOptions) -> None:
        """Wait for the streams the request asked for (the SPDY form has no empty
        message: the replies to the streams are the announcement)."""
        try:
            await asyncio.wait_for(self._ready.wait(), _STREAMS_WAIT_S)
        except TimeoutError:
            raise StreamsMissing("the client did not open the streams it asked for") from None

    async def write(self, channel: int, data: bytes) -> None:
        stream = self._ids.get(channel)
        if stream is not None and data:
            await self._send(data_frame(stream, data))

    async def events(self) -> AsyncIterator[tuple[int, bytes]]:
        while (event := await self._events.get()) is not None:
            yield event

    async def finish(self) -> None:
        """End the server's side of every stream."""
        for channel in (STDOUT, STDERR, ERROR):
            stream = self._ids.get(channel)
            if stream is not None:
                try:
                    await self._send(data_frame(stream, b"", fin=True))
                except ConnectionError:
                    return
        self._reader.cancel()
