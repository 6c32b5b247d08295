"""Attack: a local user opens TCP connections to the API port and never starts TLS. Each
held a descriptor and a slot for asyncio's default of 60 s, so a thousand of them, renewed,
starve the server of descriptors: a connection that does not finish its TLS handshake
within `--tls-handshake-timeout` is closed, while real clients keep being served."""

from __future__ import annotations

import select
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

from apiserver_proc import start, stop

SOCKETS = 40


def _closed_by_peer(sock: socket.socket) -> bool:
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_idle_connections_that_never_start_tls_are_closed(tmp_path: Path) -> None:
    proc, client = start(tmp_path, "--tls-handshake-timeout", "1")
    sockets: list[socket.socket] = []
    try:
        url = urlsplit(str(client.base_url))
        for _ in range(SOCKETS):
            sockets.append(socket.create_connection((url.hostname, url.port), timeout=5))
        # the server still answers real clients while they sit there
        assert client.get("/api/v1/namespaces").status_code == 200
        open_ = list(sockets)
        deadline = time.monotonic() + 30  # well under asyncio's own 60 s
        while open_ and time.monotonic() < deadline:
            open_ = [s for s in open_ if not _closed_by_peer(s)]
            time.sleep(0.2)
        assert not open_, f"{len(open_)} of {SOCKETS} idle connections still open"
        assert client.get("/api/v1/namespaces").status_code == 200
    finally:
        for s in sockets:
            s.close()
        stop(proc, client)


def test_a_bad_handshake_timeout_is_refused(tmp_path: Path) -> None:
    from apiserver_proc import cli

    done = cli("apiserver", "--data-dir", str(tmp_path), "--port", "0",
               "--tls-handshake-timeout", "0")
    assert done.returncode != 0 and "tls_handshake_timeout" in done.stderr, done.stderr
