"""A TLS server that records what a client sends it: the impostor of the attacks."""

from __future__ import annotations

import socket
import ssl
import threading
from pathlib import Path


class Listener:
    """Serves TLS with `cert`/`key` on 127.0.0.1; `received` holds the bytes each client
    sent after the handshake (a client that refuses the certificate sends none)."""

    def __init__(self, cert: Path, key: Path, port: int = 0) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(str(cert), str(key))
        self.sock = socket.create_server(("127.0.0.1", port))
        self.port = int(self.sock.getsockname()[1])
        self.received: list[bytes] = []
        self.handshakes_failed = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.settimeout(5)
            try:
                with self.context.wrap_socket(conn, server_side=True) as tls:
                    data = tls.recv(65536)
                    self.received.append(data)
                    tls.sendall(b"HTTP/1.1 500 Impostor\r\nContent-Length: 0\r\n"
                                b"Connection: close\r\n\r\n")
            except (ssl.SSLError, OSError):
                self.handshakes_failed += 1

    def close(self) -> None:
        self.sock.close()
