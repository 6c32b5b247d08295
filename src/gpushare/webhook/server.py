"""The webhook's HTTPS server, its self-signed serving certificate and the caBundle it puts
on its MutatingWebhookConfiguration at start.

The API server calls ``POST /mutate-pods`` over TLS and checks the serving certificate
against the configuration's ``caBundle``. With no certificate given, the webhook makes a
self-signed one for ``<service>.<namespace>.svc`` at start and writes it, base64, into the
``caBundle`` of every webhook of the named MutatingWebhookConfiguration, so no certificate
manager is needed; a restarted replica makes a new one and writes it again.
"""

from __future__ import annotations

import base64
import datetime
import json
import logging
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gpushare.api.kubelet_share import MPS_HOST_DIRECTORY
from gpushare.kube.client import ApiError, KubeClient
from gpushare.webhook.review import ReviewError, review_response

log = logging.getLogger(__name__)
MUTATE_PATH = "/mutate-pods"
MAX_BODY = 3 * 1024 * 1024
WEBHOOK_CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


def self_signed(directory: Path, dns_names: list[str], days: int = 3650) -> tuple[Path, Path]:
    """A self-signed serving certificate (its own CA) and key for ``dns_names``."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0])])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / "tls.crt", directory / "tls.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.touch(mode=0o600)
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


class _Handler(BaseHTTPRequestHandler):
    server: WebhookServer

    def log_message(self, format: str, *args: object) -> None:
        log.debug(format, *args)

    def _reply(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path in ("/healthz", "/readyz", "/livez"):
            self._reply(200, {"status": "ok"})
        else:
            self._reply(404, {"message": f"{self.path}: not found"})

    def do_POST(self) -> None:
        if self.path.split("?")[0] != MUTATE_PATH:
            self._reply(404, {"message": f"{self.path}: not found"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 < length <= MAX_BODY:
            self._reply(400, {"message": f"Content-Length: {length} not in (0, {MAX_BODY}]"})
            return
        try:
            review = json.loads(self.rfile.read(length))
            self._reply(200, review_response(review, self.server.host_directory))
        except (ValueError, ReviewError) as error:
            self._reply(400, {"message": str(error)})


class WebhookServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host: str, port: int, cert: Path, key: Path,
                 host_directory: str = MPS_HOST_DIRECTORY) -> None:
        super().__init__((host, port), _Handler)
        self.host_directory = host_directory
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(str(cert), str(key))
        self.socket = context.wrap_socket(self.socket, server_side=True)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def start(self) -> None:
        self._thread = threading.Thread(target=self.serve_forever, name="webhook", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


def put_ca_bundle(client: KubeClient, configuration: str, ca_pem: bytes) -> int:
    """Write ``ca_pem`` as the caBundle of every webhook of the MutatingWebhookConfiguration
    ``configuration`` (read, change, replace: a conflict is retried); the webhooks updated."""
    bundle = base64.b64encode(ca_pem).decode()
    path = f"{WEBHOOK_CONFIGURATIONS}/{configuration}"
    for _ in range(5):
        current = client.get(path)
        if current is None:
            raise LookupError(f"mutatingwebhookconfigurations/{configuration}: not found")
        webhooks = current.get("webhooks") or []
        for webhook in webhooks:
            webhook.setdefault("clientConfig", {})["caBundle"] = bundle
        try:
            client.replace(path, current)
            return len(webhooks)
        except ApiError as error:
            if not error.conflict:
                raise
    raise RuntimeError(f"mutatingwebhookconfigurations/{configuration}: kept conflicting")
