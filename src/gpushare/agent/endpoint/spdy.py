"""SPDY/3.1 framing, as Kubernetes' streaming uses it (moby/spdystream on the other side):
frames, the header-block codec, and the byte channels a session runs over (a WebSocket's
binary messages, or an upgraded HTTP connection).

Control frames: SYN_STREAM (a new stream; its header block names it), SYN_REPLY, RST_STREAM,
SETTINGS, PING (echoed), GOAWAY; data frames carry a stream's bytes, FIN ends that side.
Header blocks are zlib streams with SPDY/3's preset dictionary, one per direction.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import zlib
from dataclasses import dataclass
from typing import Protocol

UPGRADE = "SPDY/3.1"


class ByteChannel(Protocol):
    async def recv(self) -> bytes | None: ...

    async def send(self, data: bytes) -> None: ...


class RawChannel:
    """An upgraded connection's bytes, read and written as they come."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer

    async def recv(self) -> bytes | None:
        data = await self._reader.read(65536)
        return data or None

    async def send(self, data: bytes) -> None:
        self._writer.write(data)
        await self._writer.drain()

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            self._writer.close()


# SPDY/3's header-compression dictionary (draft 3, section 2.6.10.1): length-prefixed
# names, then a run of common values.
_DICT_NAMES_TEXT = (
    "options,head,post,put,delete,trace,accept,accept-charset,accept-encoding,"
    "accept-language,accept-ranges,age,allow,authorization,cache-control,connection,"
    "content-base,content-encoding,content-language,content-length,content-location,"
    "content-md5,content-range,content-type,date,etag,expect,expires,from,host,if-match,"
    "if-modified-since,if-none-match,if-range,if-unmodified-since,last-modified,location,"
    "max-forwards,pragma,proxy-authenticate,proxy-authorization,range,referer,retry-after,"
    "server,te,trailer,transfer-encoding,upgrade,user-agent,vary,via,warning,"
    "www-authenticate,method,get,status,200 OK,version,HTTP/1.1,url,public,set-cookie,"
    "keep-alive,origin")
_DICT_TAIL = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417"
    "502504505203 Non-Authoritative Information204 No Content301 Moved Permanently"
    "400 Bad Request401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error"
    "501 Not Implemented503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct "
    "Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,"
    "image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,text/javascript,"
    "publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.")
SPDY_DICTIONARY = b"".join(struct.pack(">I", len(n)) + n.encode()
                           for n in _DICT_NAMES_TEXT.split(",")) + _DICT_TAIL.encode()

SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY = 1, 2, 3, 4, 6, 7
FLAG_FIN = 0x01


class SpdyError(ValueError):
    """A SPDY frame that cannot be read."""


@dataclass(slots=True)
class Frame:
    control: bool
    kind: int  # control frame type; 0 for data frames
    flags: int
    stream: int  # data frames and stream-scoped control frames
    payload: bytes


def parse_frames(buffer: bytearray) -> list[Frame]:
    """The whole frames at the start of `buffer` (removed from it)."""
    frames = []
    while len(buffer) >= 8:
        first, second = struct.unpack(">II", buffer[:8])
        length = second & 0xFFFFFF
        if len(buffer) < 8 + length:
            break
        payload = bytes(buffer[8:8 + length])
        del buffer[:8 + length]
        flags = second >> 24
        if first & 0x80000000:
            version, kind = (first >> 16) & 0x7FFF, first & 0xFFFF
            if version != 3:
                raise SpdyError(f"SPDY version {version} is not supported (only 3)")
            stream = struct.unpack(">I", payload[:4])[0] & 0x7FFFFFFF \
                if kind in (SYN_STREAM, SYN_REPLY, RST_STREAM, 8, 9) and len(payload) >= 4 \
                else 0
            frames.append(Frame(True, kind, flags, stream, payload))
        else:
            frames.append(Frame(False, 0, flags, first & 0x7FFFFFFF, payload))
    return frames


def control_frame(kind: int, flags: int, payload: bytes) -> bytes:
    return struct.pack(">HHI", 0x8003, kind, (flags << 24) | len(payload)) + payload


def data_frame(stream: int, data: bytes, fin: bool = False) -> bytes:
    return struct.pack(">II", stream & 0x7FFFFFFF,
                       ((FLAG_FIN if fin else 0) << 24) | len(data)) + data


class HeaderCodec:
    """The two zlib streams of a SPDY session's header blocks."""

    def __init__(self) -> None:
        self._inflate = zlib.decompressobj(zdict=SPDY_DICTIONARY)
        self._deflate = zlib.compressobj(zdict=SPDY_DICTIONARY)

    def decode(self, block: bytes) -> dict[str, str]:
        try:
            raw = self._inflate.decompress(block)
        except zlib.error as exc:
            raise SpdyError(f"header block: {exc}") from None
        headers: dict[str, str] = {}
        try:
            (count,), at = struct.unpack(">I", raw[:4]), 4
            for _ in range(count):
                (size,) = struct.unpack(">I", raw[at:at + 4])
                name = raw[at + 4:at + 4 + size].decode()
                at += 4 + size
                (size,) = struct.unpack(">I", raw[at:at + 4])
                headers[name.lower()] = raw[at + 4:at + 4 + size].decode().split("\0")[0]
                at += 4 + size
        except (struct.error, UnicodeDecodeError) as exc:
            raise SpdyError(f"header block: {exc}") from None
        return headers

    def encode(self, headers: dict[str, str]) -> bytes:
        raw = struct.pack(">I", len(headers)) + b"".join(
            struct.pack(">I", len(k)) + k.encode() + struct.pack(">I", len(v)) + v.encode()
            for k, v in headers.items())
        return self._deflate.compress(raw) + self._deflate.flush(zlib.Z_SYNC_FLUSH)


