"""A component's own ``/healthz``, ``/livez`` and ``/readyz`` over plain HTTP, for the
kubelet's probes: ``gpushare controllers --health-port`` and ``gpushare agent --health-port``.

Each endpoint runs its named checks; all passing answers 200 ``ok``, any failing answers
500 with one ``[+]name ok`` / ``[-]name failed: why`` line per check (the API server's
format, always given with ``?verbose``). ``/livez`` is ``/healthz``'s alias. The checks are
registered by the process: the controllers are ready once they watch their leader Lease
and, while they lead, their caches have synced; the agent once its Node is registered.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = logging.getLogger(__name__)

#: A check: None when it passes, else why it fails.
Check = Callable[[], str | None]


@dataclass
class Health:
    """The named checks behind ``/healthz`` (liveness) and ``/readyz`` (readiness)."""

    live: dict[str, Check] = field(default_factory=dict)
    ready: dict[str, Check] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.live.setdefault("ping", lambda: None)
        self.ready.setdefault("ping", lambda: None)

    def report(self, which: str) -> tuple[bool, str]:
        """(all passed, one line per check) for ``live`` or ``ready``."""
        checks = self.live if which == "live" else self.ready
        lines, ok = [], True
        for name, check in checks.items():
            try:
                why = check()
            except Exception as error:  # a check that breaks fails, it does not crash
                why = f"{type(error).__name__}: {error}"
            if why is None:
                lines.append(f"[+]{name} ok")
            else:
                ok = False
                lines.append(f"[-]{name} failed: {why}")
        return ok, "\n".join(lines)


PATHS = {"/healthz": "live", "/livez": "live", "/readyz": "ready"}


def _handler(health: Health) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path, _, query = self.path.partition("?")
            which = PATHS.get(path.rstrip("/") or "/")
            if which is None:
                self._send(404, f"no such endpoint: {path}\n")
                return
            ok, lines = health.report(which)
            verbose = "verbose" in query.split("&")
            if ok:
                self._send(200, f"{lines}\n{path.strip('/')} check passed\n" if verbose else "ok")
            else:
                self._send(500, f"{lines}\n{path.strip('/')} check failed\n")

        def _send(self, code: int, text: str) -> None:
            body = text.encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            log.debug("health: " + format, *args)

    return Handler


def serve_health(health: Health, port: int, address: str = "0.0.0.0") -> ThreadingHTTPServer:
    """Serve ``health`` on ``address:port`` from a daemon thread; ``shutdown()`` stops it."""
    server = ThreadingHTTPServer((address, port), _handler(health))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
    return server
