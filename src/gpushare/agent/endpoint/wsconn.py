"""A WebSocket connection over an asyncio stream pair, with `websockets`' sans-I/O protocol.

The node server reads the HTTP request itself (it needs the TLS peer certificate and the
raw headers before anything else), so the WebSocket handshake and framing run on the
streams it already holds: `accept()` answers the upgrade, `recv()` gives whole messages
(pings are answered by the protocol), `send()` writes one binary message.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence

from websockets.frames import Frame, Opcode
from websockets.http11 import Request
from websockets.server import ServerProtocol
from websockets.typing import Subprotocol

_READ = 65536
_log = logging.getLogger("gpushare.agent.websocket")
_log.setLevel(logging.WARNING)  # not every connection's opening and closing


class WsConn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 protocol: ServerProtocol) -> None:
        self._reader, self._writer, self._protocol = reader, writer, protocol
        self._pending: list[bytes] = []
        self._parts: list[bytes] = []
        self._closed = False
        self._send_lock = asyncio.Lock()
        self.subprotocol: str = protocol.subprotocol or ""

    @classmethod
    async def accept(cls, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     head: bytes, offered_order: Sequence[str]) -> WsConn | None:
        """Answer the upgrade whose request head (up to the blank line) is `head`, choosing
        the first of `offered_order` the client offers; None (after a 400 answer) when the
        handshake fails."""

        def choose(_: ServerProtocol, offered: Sequence[Subprotocol]) -> Subprotocol | None:
            for name in offered_order:
                if name in offered:
                    return Subprotocol(name)
            return None

        protocol = ServerProtocol(subprotocols=[Subprotocol(p) for p in offered_order],
                                  select_subprotocol=choose, max_size=None, logger=_log)
        protocol.receive_data(head)
        request = next((e for e in protocol.events_received() if isinstance(e, Request)), None)
        if request is None:
            writer.write(b"".join(protocol.data_to_send()))
            await writer.drain()
            return None
        response = protocol.accept(request)
        protocol.send_response(response)
        writer.write(b"".join(protocol.data_to_send()))
        await writer.drain()
        if response.status_code != 101:
            return None
        return cls(reader, writer, protocol)

    def _flush(self) -> None:
        data = b"".join(self._protocol.data_to_send())
        if data:
            self._writer.write(data)

    async def recv(self) -> bytes | None:
        """The next message (text or binary, as bytes); None once the peer closed."""
        while not self._pending:
            if self._closed:
                return None
            data = await self._reader.read(_READ)
            if data:
                self._protocol.receive_data(data)
            else:
                self._protocol.receive_eof()
            for frame in self._protocol.events_received():
                if not isinstance(frame, Frame):
                    continue
                if frame.opcode in (Opcode.TEXT, Opcode.BINARY, Opcode.CONT):
                    self._parts.append(bytes(frame.data))
                    if frame.fin:
                        self._pending.append(b"".join(self._parts))
                        self._parts = []
                elif frame.opcode == Opcode.CLOSE:
                    self._closed = True
            self._flush()
            with contextlib.suppress(ConnectionError):
                await self._writer.drain()
            if not data:
                self._closed = True
        return self._pending.pop(0)

    async def send(self, data: bytes) -> None:
        async with self._send_lock:
            if self._closed:
                raise ConnectionResetError("the WebSocket is closed")
            self._protocol.send_binary(data)
            self._flush()
            await self._writer.drain()

    async def close(self, code: int = 1000, reason: str = "") -> None:
        async with self._send_lock:
            with contextlib.suppress(Exception):
                self._protocol.send_close(code, reason)
                self._flush()
                await self._writer.drain()
            self._closed = True
