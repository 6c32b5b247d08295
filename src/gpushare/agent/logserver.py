"""The kubelet-style log endpoint the API server proxies `kubectl logs` to.

    GET /containerLogs/{namespace}/{pod}/{container}?follow=&tailLines=&timestamps=&previous=

Plain `http.server` in a thread: a handful of concurrent readers at most, and a follow is a
chunked response that ends when the container's run ends.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from gpushare.agent.logstore import (
    LogNotFound,
    LogRequest,
    follow_log,
    read_log,
    select_log,
)

_NAME = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")

# (namespace, pod) -> pod directory, or None when this node runs no such pod
PodLocator = Callable[[str, str], Path | None]
# (namespace, pod, container) -> whether the container's current run is still going
RunningCheck = Callable[[str, str, str], bool]


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


class LogServer:
    def __init__(
        self, locate: PodLocator, running: RunningCheck, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self._locate = locate
        self._running = running
        self._stopping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                return  # quiet: the agent logs what matters

            def do_GET(self) -> None:
                server._handle(self)

        self._httpd = ThreadingHTTPServer((host, port), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="log server", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        if urlsplit(h.path).path in ("/healthz", "/healthz/"):
            self._send(h, 200, b"ok")
            return
        try:
            request = parse_request(h.path)
        except ValueError as exc:
            self._send(h, 400, f"{exc}\n".encode())
            return
        directory = self._locate(request.namespace, request.pod)
        if directory is None:
            self._send(h, 404, f'pods "{request.pod}" not found on this node\n'.encode())
            return
        try:
            path = select_log(directory, request)
        except LogNotFound as exc:
            self._send(h, 404 if not request.previous else 400, f"{exc}\n".encode())
            return
        if not request.follow:
            body, _ = read_log(path, request)
            self._send(h, 200, body)
            return
        h.send_response(200)
        h.send_header("Content-Type", "text/plain; charset=utf-8")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()

        def still_running() -> bool:
            return self._running(request.namespace, request.pod, request.container)

        try:
            for chunk in follow_log(
                path, request, still_running, should_stop=self._stopping.is_set
            ):
                h.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                h.wfile.flush()
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            return
        finally:
            h.close_connection = True

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, code: int, body: bytes) -> None:
        h.send_response(code)
        h.send_header("Content-Type", "text/plain; charset=utf-8")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            h.wfile.write(body)
