"""Port-forward to a pod: its processes listen on this host, so a forwarded connection is a
TCP connection to 127.0.0.1:<port>.

Two wire forms, both over the WebSocket the API server relays:

* `SPDY/3.1+portforward.k8s.io` (kubectl 1.31+; `SPDY-3.1+portforward.k8s.io` on the API
  server's hop to the agent, see `contracts.node_hop_subprotocol`): the WebSocket's binary
  messages carry a SPDY/3.1 session. For each connection the client opens two streams with
  the headers `streamtype` (`error` or `data`), `port` and `requestid`; the server answers
  each with a
  SYN_REPLY, copies bytes between the data stream and the TCP connection, and writes a
  message on the error stream (then ends it) when the connection fails. Header blocks are
  zlib streams with SPDY/3's preset dictionary, one per direction.
* `v4.channel.k8s.io` with `?ports=` (the official Python client): for the i-th port,
  channel 2i carries data and 2i+1 errors; the first message on each channel is the port
  (two bytes, little-endian).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from dataclasses import dataclass, field

from gpushare.agent.endpoint.spdy import (
    FLAG_FIN,
    GOAWAY,
    PING,
    RST_STREAM,
    SYN_REPLY,
    SYN_STREAM,
    ByteChannel,
    Frame,
    HeaderCodec,
    SpdyError,
    control_frame,
    data_frame,
    parse_frames,
)
from gpushare.agent.endpoint.wsconn import WsConn
from gpushare.agent.runtime.network.podnet import dial
from gpushare.api.contracts import node_hop_subprotocol

# kubectl asks the API server for "SPDY/3.1+portforward.k8s.io"; the API server asks the
# agent for the same name in token form
SPDY_TUNNEL = node_hop_subprotocol("SPDY/3.1+portforward.k8s.io")
CHANNEL_V4 = "v4.channel.k8s.io"
PORT_FORWARD_PROTOCOLS = (SPDY_TUNNEL, CHANNEL_V4)
_HOST = "127.0.0.1"
_CHUNK = 32768
SPDY_PORT_FORWARD = "portforward.k8s.io"  # X-Stream-Protocol-Version of a SPDY upgrade

@dataclass(slots=True)
class _Pair:
    """The data and error streams of one forwarded connection."""

    port: int
    data: int | None = None
    error: int | None = None
    writer: asyncio.StreamWriter | None = None
    task: asyncio.Task[None] | None = None
    pending: list[bytes] = field(default_factory=list)  # data before the connection opened
    client_done: bool = False


class SpdySession:
    """Port-forward streams of one SPDY session, over a WebSocket (kubectl's tunnel) or
    the upgraded connection itself (a kube-apiserver's SPDY request)."""

    def __init__(self, ws: ByteChannel, netns: str | None = None) -> None:
        self._ws = ws
        self._netns = netns
        self._codec = HeaderCodec()
        self._pairs: dict[str, _Pair] = {}
        self._by_stream: dict[int, _Pair] = {}
        self._send_lock = asyncio.Lock()

    async def _send(self, data: bytes) -> None:
        async with self._send_lock:
            await self._ws.send(data)

    async def run(self) -> None:
        buffer = bytearray()
        try:
            while (message := await self._ws.recv()) is not None:
                buffer += message
                for frame in parse_frames(buffer):
                    if not await self._on_frame(frame):
                        return
        except SpdyError:
            return
        finally:
            for pair in list(self._pairs.values()):
                if pair.task is not None:
                    pair.task.cancel()
                if pair.writer is not None:
                    pair.writer.close()

    async def _on_frame(self, frame: Frame) -> bool:
        if not frame.control:
            pair = self._by_stream.get(frame.stream)
            if pair is not None and frame.stream == pair.data:
                await self._client_data(pair, frame.payload, bool(frame.flags & FLAG_FIN))
            return True
        if frame.kind == SYN_STREAM:
            await self._open_stream(frame)
        elif frame.kind == RST_STREAM:
            pair = self._by_stream.get(frame.stream)
            if pair is not None and pair.writer is not None:
                pair.writer.close()
        elif frame.kind == PING:
            await self._send(control_frame(PING, 0, frame.payload[:4]))
        elif frame.kind == GOAWAY:
            return False
        return True  # SETTINGS, WINDOW_UPDATE, HEADERS: nothing to do

    async def _open_stream(self, frame: Frame) -> None:
        headers = self._codec.decode(frame.payload[10:])
        stream = frame.stream
        await self._send(control_frame(SYN_REPLY, 0, struct.pack(">I", stream) +
                                       self._codec.encode({})))
        kind, request = headers.get("streamtype", ""), headers.get("requestid", "")
        try:
            port = int(headers.get("port", ""))
        except ValueError:
            port = 0
        if kind not in ("data", "error"):
            await self._send(control_frame(RST_STREAM, 0, struct.pack(">II", stream, 1)))
            return
        pair = self._pairs.setdefault(request or str(stream), _Pair(port))
        setattr(pair, kind, stream)
        self._by_stream[stream] = pair
        if pair.data is not None and pair.error is not None and pair.task is None:
            pair.task = asyncio.ensure_future(self._forward(request or str(stream), pair))

    async def _client_data(self, pair: _Pair, data: bytes, fin: bool) -> None:
        if pair.writer is None:
            pair.pending.append(data)
        elif data:
            pair.writer.write(data)
            with contextlib.suppress(ConnectionError):
                await pair.writer.drain()
        if fin:
            pair.client_done = True
            if pair.writer is not None and pair.writer.can_write_eof():
                with contextlib.suppress(OSError):
                    pair.writer.write_eof()

    async def _forward(self, key: str, pair: _Pair) -> None:
        assert pair.data is not None and pair.error is not None
        try:
            if not 0 < pair.port < 65536:
                raise OSError(f"invalid port {pair.port}")
            reader, pair.writer = await _connect(self._netns, pair.port)
        except OSError as exc:
            message = (f"error forwarding port {pair.port} to pod: failed to connect to "
                       f"localhost:{pair.port}: {exc}")
            await self._send(data_frame(pair.error, message.encode(), fin=True))
            return
        for data in pair.pending:
            pair.writer.write(data)
        pair.pending.clear()
        if pair.client_done and pair.writer.can_write_eof():
            pair.writer.write_eof()
        try:
            while data := await reader.read(_CHUNK):
                await self._send(data_frame(pair.data, data))
            await self._send(data_frame(pair.data, b"", fin=True))
            await self._send(data_frame(pair.error, b"", fin=True))
        except ConnectionError:
            pass
        finally:
            pair.writer.close()
            self._pairs.pop(key, None)


async def _connect(netns: str | None, port: int) -> tuple[asyncio.StreamReader,
                                                          asyncio.StreamWriter]:
    """A connection to the pod's ``localhost:port``: inside its network namespace when it
    has one (a thread enters it for the connect), else the node's."""
    if netns is None:
        return await asyncio.open_connection(_HOST, port)
    sock = await asyncio.get_running_loop().run_in_executor(None, dial, netns, port)
    sock.setblocking(False)
    return await asyncio.open_connection(sock=sock)


async def _forward_channels(ws: WsConn, ports: list[int], netns: str | None) -> None:
    """The v4 channel form: one TCP connection per port for the WebSocket's life; the
    WebSocket ends when every connection has."""
    writers: dict[int, asyncio.StreamWriter] = {}
    pumps = []

    async def pump(index: int, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(_CHUNK):
                await ws.send(bytes([2 * index]) + data)

    async def from_client() -> None:
        while (message := await ws.recv()) is not None:
            writer = writers.get(message[0] // 2) if message and message[0] % 2 == 0 \
                else None
            if writer is not None:
                writer.write(message[1:])
                with contextlib.suppress(ConnectionError):
                    await writer.drain()

    for index, port in enumerate(ports):
        prefix = struct.pack("<H", port)
        await ws.send(bytes([2 * index]) + prefix)
        await ws.send(bytes([2 * index + 1]) + prefix)
        try:
            reader, writers[index] = await _connect(netns, port)
        except OSError as exc:
            await ws.send(bytes([2 * index + 1]) + f"error forwarding port {port} to pod: "
                          f"{exc}".encode())
            continue
        pumps.append(asyncio.ensure_future(pump(index, reader)))
    client = asyncio.ensure_future(from_client())
    try:
        if pumps:
            all_ended: asyncio.Future[list[None]] = asyncio.gather(*pumps)
            await asyncio.wait([client, all_ended],  # type: ignore[type-var]
                               return_when=asyncio.FIRST_COMPLETED)
    finally:
        client.cancel()
        for task in pumps:
            task.cancel()
        for writer in writers.values():
            writer.close()


def _ports(query: dict[str, list[str]]) -> list[int]:
    ports = []
    for value in query.get("ports") or []:
        for part in value.split(","):
            if part.strip():
                ports.append(int(part))
    return ports


async def run_port_forward(ws: WsConn, query: dict[str, list[str]],
                           netns: str | None = None) -> None:
    if ws.subprotocol == SPDY_TUNNEL:
        await SpdySession(ws, netns).run()
        return
    try:
        ports = _ports(query)
    except ValueError:
        await ws.send(bytes([1]) + b"ports: every port must be a number")
        return
    if not ports:
        await ws.send(bytes([1]) + b"ports: at least one port is required")
        return
    await _forward_channels(ws, ports, netns)
