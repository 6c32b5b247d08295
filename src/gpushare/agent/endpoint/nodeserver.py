"""The agent's node endpoint, kubelet style, over HTTPS: what the API server proxies
`kubectl logs`, `exec`, `attach`, `cp` and `port-forward` to.

    GET /containerLogs/{namespace}/{pod}/{container}?follow=&tailLines=&timestamps=&previous=
    GET /exec/{namespace}/{pod}/{container}?command=..&stdin=&stdout=&stderr=&tty=  (WebSocket)
    GET /attach/{namespace}/{pod}/{container}?stdin=&stdout=&stderr=&tty=  (WebSocket)
    GET /portForward/{namespace}/{pod}[?ports=..]  (WebSocket)
    GET /healthz

TLS with the certificate the cluster CA signed for this node (`nodecert`); every request
must come from the API server's client certificate or carry a token allowed `nodes/proxy`
(`nodeauth`); there is no plain-HTTP listener. An asyncio server in a thread of its own:
the request head is read here, a WebSocket upgrade continues on the same streams
(`wsconn`), and the blocking parts (log files, reviews) run in the default executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from gpushare.agent.endpoint.portforward import (
    PORT_FORWARD_PROTOCOLS,
    SPDY_PORT_FORWARD,
    SpdySession,
    run_port_forward,
)
from gpushare.agent.endpoint.spdy import UPGRADE as SPDY_UPGRADE
from gpushare.agent.endpoint.spdy import RawChannel
from gpushare.agent.endpoint.spdyexec import SPDY_CHANNEL_PROTOCOLS, SpdyChannels, StreamsMissing
from gpushare.agent.endpoint.streams import (
    CHANNEL_PROTOCOLS,
    Channels,
    ExecTarget,
    StreamOptions,
    WsChannels,
    run_attach,
    run_exec,
)
from gpushare.agent.endpoint.wsconn import WsConn
from gpushare.agent.node.nodeauth import Verdict
from gpushare.agent.node.nodecert import NodeTls
from gpushare.agent.runtime.logstore import (
    LogNotFound,
    LogRequest,
    follow_log,
    read_log,
    select_log,
)
from gpushare.agent.runtime.sandbox import SandboxError, SandboxNotEntered
from gpushare.agent.runtime.stdio import ContainerStdin

log = logging.getLogger("gpushare.agent")

_NAME = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")

# (namespace, pod) -> pod directory, or None when this node runs no such pod
PodLocator = Callable[[str, str], Path | None]
# (namespace, pod, container) -> whether the container's current run is still going
RunningCheck = Callable[[str, str, str], bool]
# (namespace, pod, container, command) -> how to run it in the pod; LookupError: no such
# running container (the message says so)
ExecLocator = Callable[[str, str, str, list[str]], ExecTarget]
StdinLocator = Callable[[str, str, str], ContainerStdin | None]  # (ns, pod, container)
# (peer certificate, Authorization header, verb) -> may the caller in
CallerCheck = Callable[[dict[str, Any] | None, str, str], Verdict]
_HEAD_LIMIT = 64 * 1024
_STREAM_THREADS = 256
#: How long an exec waits for a container that is starting to enter its sandbox.
SANDBOX_WAIT_S = 10.0
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
            404: "Not Found", 405: "Method Not Allowed", 500: "Internal Server Error",
            503: "Service Unavailable"}


def _flag(query: dict[str, list[str]], name: str) -> bool:
    return (query.get(name) or ["false"])[-1].lower() in ("true", "1", "yes")


def parse_request(path: str) -> LogRequest:
    parts = urlsplit(path)
    segments = [unquote(s) for s in parts.path.split("/") if s]
    if len(segments) != 4 or segments[0] != "containerLogs":
        raise ValueError("expected /containerLogs/{namespace}/{pod}/{container}")
    for what, value in zip(("namespace", "pod", "container"), segments[1:], strict=True):
        # Kubernetes names; anything else (a '/', '..') could point outside the pod directory
        if not _NAME.match(value):
            raise ValueError(f"{what}: {value!r} is not a valid name")
    query = parse_qs(parts.query)
    tail: int | None = None
    if query.get("tailLines"):
        raw = query["tailLines"][-1]
        try:
            tail = int(raw)
        except ValueError:
            raise ValueError(f"tailLines: {raw!r} is not a whole number") from None
        if tail < 0:
            tail = None  # kubectl sends -1 for "all"
    numbers: dict[str, int | None] = {}
    for name in ("sinceSeconds", "limitBytes"):
        raw_values = query.get(name)
        if not raw_values:
            numbers[name] = None
            continue
        try:
            numbers[name] = max(0, int(raw_values[-1]))
        except ValueError:
            raise ValueError(f"{name}: {raw_values[-1]!r} is not a whole number") from None
    return LogRequest(
        since_seconds=numbers["sinceSeconds"],
        limit_bytes=numbers["limitBytes"],
        namespace=segments[1],
        pod=segments[2],
        container=segments[3],
        follow=_flag(query, "follow"),
        tail_lines=tail,
        timestamps=_flag(query, "timestamps"),
        previous=_flag(query, "previous"),
    )


def _segments(path: str, first: str, count: int) -> list[str]:
    """The names after `/first/`, checked as Kubernetes names."""
    segments = [unquote(s) for s in urlsplit(path).path.split("/") if s]
    if len(segments) != count + 1 or segments[0] != first:
        raise ValueError(f"expected /{first}/" + "/".join(
            ("{namespace}", "{pod}", "{container}")[:count]))
    for what, value in zip(("namespace", "pod", "container"), segments[1:], strict=False):
        if not _NAME.match(value):
            raise ValueError(f"{what}: {value!r} is not a valid name")
    return segments[1:]


@dataclass(frozen=True, slots=True)
class NodeHandlers:
    """What the server asks the agent."""

    locate: PodLocator
    running: RunningCheck
    exec_target: ExecLocator
    stdin: StdinLocator | None = None  # a running container's open input (attach -i)
    #: The pod's network namespace (port-forward connects to localhost inside it); None:
    #: the node's network.
    pod_netns: Callable[[str, str], str | None] | None = None


@dataclass(slots=True)
class _Request:
    method: str
    target: str
    headers: list[tuple[str, str]]
    raw: bytes
    reader: asyncio.StreamReader | None = None

    def header(self, name: str) -> str:
        found = [v for k, v in self.headers if k.lower() == name]
        return ", ".join(found)

    @property
    def upgrade(self) -> bool:
        return self.header("upgrade").lower() == "websocket"

    @property
    def spdy(self) -> bool:
        return self.header("upgrade").lower() == SPDY_UPGRADE.lower()


def _parse_head(raw: bytes) -> _Request:
    lines = raw.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise ValueError("not an HTTP/1.1 request line")
    headers = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise ValueError(f"bad header line {line!r}")
        headers.append((name.strip(), value.strip()))
    return _Request(parts[0], parts[1], headers, raw)


def server_context(tls: NodeTls) -> ssl.SSLContext:
    """TLS with the node's certificate; a client certificate is asked for and, when given,
    must be the cluster CA's (the API server's); a token is the other way in."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(tls.cert), str(tls.key))
    context.load_verify_locations(cafile=str(tls.ca))
    context.verify_mode = ssl.CERT_OPTIONAL
    return context


class NodeServer:
    def __init__(self, handlers: NodeHandlers, tls: NodeTls, check: CallerCheck,
                 host: str = "127.0.0.1", port: int = 0) -> None:
        self._handlers = handlers
        self._check = check
        self.tls = tls
        self._context = server_context(tls)
        self._stopping = threading.Event()
        self._sock = socket.create_server((host, port), reuse_port=False)
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self._run, name="node server", daemon=True)
        # the reviews of callers have threads of their own: streams cannot starve them
        self._checks = ThreadPoolExecutor(max_workers=8, thread_name_prefix="node auth")

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    def reload(self, tls: NodeTls) -> None:
        """Serve a renewed certificate from the next connection on."""
        self._context.load_cert_chain(str(tls.cert), str(tls.key))
        self.tls = tls

    def start(self) -> None:
        ready = threading.Event()
        self._loop.call_soon(ready.set)
        self._thread.start()
        ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        # every follow, attach and exec holds an executor thread while it lasts (a blocking
        # read of a growing log, a wait for the command): a pool sized for many of them,
        # so that they never starve the reviews of new requests
        self._loop.set_default_executor(ThreadPoolExecutor(
            max_workers=_STREAM_THREADS, thread_name_prefix="node server"))
        self._server = self._loop.run_until_complete(asyncio.start_server(
            self._serve, sock=self._sock, ssl=self._context, limit=_HEAD_LIMIT,
            ssl_handshake_timeout=10))
        self._loop.run_forever()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            def halt() -> None:
                if self._server is not None:
                    self._server.close()
                for task in asyncio.all_tasks(self._loop):
                    task.cancel()
                self._loop.call_later(0.2, self._loop.stop)

            self._loop.call_soon_threadsafe(halt)
            self._thread.join(5)
        with contextlib.suppress(OSError):
            self._sock.close()
        self._checks.shutdown(wait=False, cancel_futures=True)

    # --- one connection -----------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._one_request(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                ssl.SSLError, TimeoutError, asyncio.CancelledError):
            pass  # the client went away, or the server is stopping
        except Exception:
            log.exception("node server request failed")
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _one_request(self, reader: asyncio.StreamReader,
                           writer: asyncio.StreamWriter) -> None:
        raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        try:
            request = _parse_head(raw)
        except ValueError as exc:
            await _respond(writer, 400, f"{exc}\n")
            return
        request.reader = reader
        path = urlsplit(request.target).path
        first = next((s for s in path.split("/") if s), "")
        streaming = first in ("exec", "attach", "portForward")
        verb = "create" if streaming or request.method not in ("GET", "HEAD") else "get"
        loop = asyncio.get_running_loop()
        verdict = await loop.run_in_executor(
            self._checks, self._check, writer.get_extra_info("peercert"),
            request.header("authorization"), verb)
        if not verdict.allowed:
            await _respond(writer, verdict.code, f"{verdict.message}\n")
            return
        if request.method != "GET" and not (streaming and request.method == "POST"):
            await _respond(writer, 405, f"method {request.method} is not allowed\n")
            return
        if path in ("/healthz", "/healthz/"):
            await _respond(writer, 200, "ok")
        elif first == "containerLogs":
            await self._logs(request, writer)
        elif streaming:
            await self._stream(first, request, reader, writer)
        else:
            await _respond(writer, 404, f"no such endpoint: {path}\n")

    async def _logs(self, request: _Request, writer: asyncio.StreamWriter) -> None:
        try:
            wanted = parse_request(request.target)
        except ValueError as exc:
            await _respond(writer, 400, f"{exc}\n")
            return
        loop = asyncio.get_running_loop()
        directory = self._handlers.locate(wanted.namespace, wanted.pod)
        if directory is None:
            await _respond(writer, 404, f'pods "{wanted.pod}" not found on this node\n')
            return
        try:
            path = select_log(directory, wanted)
        except LogNotFound as exc:
            await _respond(writer, 404 if not wanted.previous else 400, f"{exc}\n")
            return
        if not wanted.follow:
            body, _ = await loop.run_in_executor(None, read_log, path, wanted)
            await _respond(writer, 200, body)
            return
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\n"
                     b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
        await writer.drain()
        leaving = threading.Event()

        def stop() -> bool:
            return leaving.is_set() or self._stopping.is_set()

        chunks = follow_log(path, wanted, lambda: self._handlers.running(
            wanted.namespace, wanted.pod, wanted.container), should_stop=stop)
        try:
            while (chunk := await loop.run_in_executor(None, next, chunks, None)) is not None:
                writer.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        finally:
            leaving.set()

    async def _stream(self, kind: str, request: _Request, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        if not (request.upgrade or request.spdy):
            await _respond(writer, 400, "Upgrade request required\n")
            return
        query = parse_qs(urlsplit(request.target).query)
        try:
            names = _segments(request.target, kind, 2 if kind == "portForward" else 3)
        except ValueError as exc:
            await _respond(writer, 400, f"{exc}\n")
            return
        namespace, pod = names[0], names[1]
        if self._handlers.locate(namespace, pod) is None:
            await _respond(writer, 404, f'pods "{pod}" not found on this node\n')
            return
        if kind == "portForward":
            netns = self._handlers.pod_netns(namespace, pod) if self._handlers.pod_netns \
                else None
            if request.spdy:
                raw = await _spdy_upgrade(request, writer, (SPDY_PORT_FORWARD,))
                if raw is not None:
                    await SpdySession(raw, netns).run()
                return
            ws = await WsConn.accept(reader, writer, request.raw, PORT_FORWARD_PROTOCOLS)
            if ws is not None:
                await run_port_forward(ws, query, netns)
                await ws.close()
            return
        container = names[2]
        opts = StreamOptions.from_query(query)
        command = query.get("command") or []
        target: ExecTarget | None = None
        if kind == "exec":
            if not command:
                await _respond(writer, 400, "you must specify at least one command\n")
                return
            try:
                target = await self._exec_target(namespace, pod, container, command)
            except LookupError as exc:
                await _respond(writer, 404, f"{exc.args[0] if exc.args else exc}\n")
                return
            except SandboxError as exc:
                await _respond(writer, 503 if isinstance(exc, SandboxNotEntered) else 500,
                               f"{exc}\n")
                return
        elif not self._handlers.running(namespace, pod, container):
            await _respond(writer, 404, f'container "{container}" in pod "{pod}" is not '
                                        "running\n")
            return
        if request.spdy:
            raw = await _spdy_upgrade(request, writer, SPDY_CHANNEL_PROTOCOLS)
            if raw is None:
                return
            channels = SpdyChannels(raw, opts)
            try:
                await self._run_stream(channels, target, command, opts, namespace, pod,
                                       container)
            except StreamsMissing:
                pass
            finally:
                await channels.finish()
            return
        ws = await WsConn.accept(reader, writer, request.raw, CHANNEL_PROTOCOLS)
        if ws is None:
            return
        await self._run_stream(WsChannels(ws), target, command, opts, namespace, pod,
                               container)
        await ws.close()

    async def _exec_target(self, namespace: str, pod: str, container: str,
                           command: list[str]) -> ExecTarget:
        """Where the exec runs; while the container is still entering its sandbox, asked
        again every 50 ms for up to SANDBOX_WAIT_S (never in the host's namespaces)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SANDBOX_WAIT_S
        while True:
            try:
                return self._handlers.exec_target(namespace, pod, container, command)
            except SandboxNotEntered:
                if loop.time() >= deadline:
                    raise
                await asyncio.sleep(0.05)

    async def _run_stream(self, channels: Channels, target: ExecTarget | None,
                          command: list[str], opts: StreamOptions, namespace: str, pod: str,
                          container: str) -> None:
        if target is not None:
            await run_exec(channels, target, command, opts)
        else:
            stdin = (self._handlers.stdin(namespace, pod, container)
                     if opts.stdin and self._handlers.stdin is not None else None)
            await run_attach(channels, self._attach_source(namespace, pod, container), opts,
                             stdin)

    def _attach_source(self, namespace: str, pod: str, container: str
                       ) -> Callable[[Callable[[], bool]], Iterator[bytes]]:
        def follow(should_stop: Callable[[], bool]) -> Iterator[bytes]:
            directory = self._handlers.locate(namespace, pod)
            if directory is None:
                return iter(())
            wanted = LogRequest(namespace=namespace, pod=pod, container=container,
                                follow=True, tail_lines=0)
            try:
                path = select_log(directory, wanted)
            except LogNotFound:
                return iter(())
            return follow_log(path, wanted, lambda: self._handlers.running(
                namespace, pod, container), should_stop=lambda: should_stop() or
                self._stopping.is_set())

        return follow


async def _spdy_upgrade(request: _Request, writer: asyncio.StreamWriter,
                        protocols: tuple[str, ...]) -> RawChannel | None:
    """Answer a SPDY/3.1 upgrade with the first of `protocols` the client offers in its
    X-Stream-Protocol-Version headers; None (after a 403 answer, as a kubelet's) if none."""
    offered = [p.strip() for p in request.header("x-stream-protocol-version").split(",")]
    chosen = next((p for p in protocols if p in offered), None)
    if chosen is None:
        await _respond(writer, 403, f"none of the offered stream protocols {offered} is "
                                    f"supported; this node speaks {list(protocols)}\n")
        return None
    writer.write(f"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n"
                 f"Upgrade: {SPDY_UPGRADE}\r\nX-Stream-Protocol-Version: {chosen}\r\n\r\n"
                 .encode())
    await writer.drain()
    assert request.reader is not None
    return RawChannel(request.reader, writer)


async def _respond(writer: asyncio.StreamWriter, code: int, body: bytes | str) -> None:
    data = body.encode() if isinstance(body, str) else body
    writer.write(f"HTTP/1.1 {code} {_REASONS.get(code, 'Error')}\r\n"
                 "Content-Type: text/plain; charset=utf-8\r\n"
                 f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)
    with contextlib.suppress(ConnectionError):
        await writer.drain()
