"""`ApiServer`: the embedded control plane's HTTP server, in a thread or in the foreground."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import uvicorn
import yaml

from gpushare.api.kubeconfig import kubeconfig
from gpushare.api.plugins import PluginFactory
from gpushare.apiserver.admission.mutating import MutatingWebhooks
from gpushare.apiserver.auth import components, noderestriction
from gpushare.apiserver.auth.access import TokenFile
from gpushare.apiserver.auth.serviceaccounts import SIGNING_KEY as SA_SIGNING_KEY
from gpushare.apiserver.auth.serviceaccounts import TokenSigner
from gpushare.apiserver.auth.tls import ensure_certificates, ensure_node_ca, ensure_node_client
from gpushare.apiserver.http.app import App
from gpushare.apiserver.http.flowcontrol import FlowControlConfig, platform_write
from gpushare.apiserver.http.limits import DEFAULT_MAX_BODY_BYTES
from gpushare.apiserver.http.nodeproxy import client_context
from gpushare.apiserver.registry import builtin_kinds, certificates
from gpushare.apiserver.registry.api import DEFAULT_CLUSTER, Api
from gpushare.apiserver.registry.certificates import NodeServingSigner
from gpushare.apiserver.storage import snapshot, space
from gpushare.apiserver.storage.encryption import Transformer
from gpushare.apiserver.storage.store import DEFAULT_EVENT_LOG_BYTES, Store
from gpushare.apiserver.storage.tenantquota import TenantUsage
from gpushare.apiserver.storage.watch import DEFAULT_BACKLOG_BYTES

log = logging.getLogger(__name__)

#: per-tenant fairness as the server runs by default (`fairness=None` turns it off)
DEFAULT_FAIRNESS = FlowControlConfig()
KUBECONFIG_NAME = "admin.kubeconfig"
TOKENS_NAME = "tokens.yaml"
DB_NAME = "state.db"
LOCK_NAME = "apiserver.lock"


def restrict_data_dir(data_dir: Path) -> None:
    """The data directory holds the store, tokens and keys: owner only (0700), and the
    files in it that exist already 0600 (the store is created 0600 and SQLite gives its
    -wal/-shm files the store's mode)."""
    data_dir.chmod(0o700)
    pki = data_dir / "pki"
    if pki.is_dir():
        pki.chmod(0o700)
    for path in [*data_dir.glob(f"{DB_NAME}*"), data_dir / TOKENS_NAME,
                 data_dir / KUBECONFIG_NAME, *(pki.glob("*.key") if pki.is_dir() else ())]:
        if path.is_file():
            path.chmod(0o600)
    db = data_dir / DB_NAME
    if not db.exists():
        os.close(os.open(db, os.O_CREAT | os.O_WRONLY, 0o600))


#: Seconds a client has to complete the TLS handshake (kube-apiserver's is 10 s).
DEFAULT_TLS_HANDSHAKE_TIMEOUT = 10.0


class _Server(uvicorn.Server):
    """uvicorn's server, ending watch streams first so that shutdown does not wait on them."""

    def __init__(self, config: uvicorn.Config, app: App, handshake_timeout: float) -> None:
        super().__init__(config)
        self._app = app
        self._handshake_timeout = handshake_timeout

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's startup, its TLS listeners given a handshake deadline: a connection that
        does not finish its TLS handshake in time is closed (asyncio's own default, 60 s, let
        idle sockets pile up until the process ran out of descriptors)."""
        loop = asyncio.get_running_loop()
        create = loop.create_server
        deadline = self._handshake_timeout

        async def create_server(*args: Any, **kwargs: Any) -> asyncio.Server:
            if kwargs.get("ssl") is not None:
                kwargs.setdefault("ssl_handshake_timeout", deadline)
            return await create(*args, **kwargs)

        loop.create_server = create_server  # type: ignore[method-assign]
        try:
            await super().startup(sockets)
        finally:
            del loop.create_server

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._app.hub.close_all()
        await super().shutdown(sockets)


def _listening_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1024)
    except OSError:
        sock.close()
        raise
    return sock


class ApiServer:
    """The API server over the state in `data_dir`.

    `start()` serves from a background thread (tests, `gpushare up`), `serve_forever()` from
    the calling thread (Ctrl-C stops it cleanly), `stop()` ends either.
    """

    def __init__(self, data_dir: Path | str, host: str = "127.0.0.1", port: int = 0, *,
                 bookmark_interval: float = 60.0, event_log_size: int = 50_000,
                 tls: bool = True, event_ttl: float = 3600.0, sync: str = "full",
                 max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                 event_log_bytes: int = DEFAULT_EVENT_LOG_BYTES,
                 anonymous_metrics: bool = False, commit_thread: bool = True,
                 plugins: Sequence[PluginFactory] = (),
                 storage_quota_bytes: int = space.DEFAULT_QUOTA_BYTES,
                 storage_reserve_bytes: int = space.DEFAULT_RESERVE_BYTES,
                 tls_handshake_timeout: float = DEFAULT_TLS_HANDSHAKE_TIMEOUT,
                 fairness: FlowControlConfig | None = DEFAULT_FAIRNESS,
                 watch_backlog_bytes: int = DEFAULT_BACKLOG_BYTES,
                 tenant_quotas: bool = True, tls_sans: Sequence[str] = ()) -> None:
        if not tls_handshake_timeout > 0:
            raise ValueError(f"tls_handshake_timeout must be > 0, not {tls_handshake_timeout}")
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        snapshot.check_store_file(self.data_dir)  # a lost state.db is not a new cluster
        restrict_data_dir(self.data_dir)
        # One server per data directory: two would each trust their own copy in memory.
        self._lock = (self.data_dir / LOCK_NAME).open("a")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            self._lock.close()
            raise RuntimeError(f"another API server is using {self.data_dir}") from e
        self.host = host
        try:
            self._sock = _listening_socket(host, port)
        except OSError:
            self._lock.close()
            raise
        self.port = self._sock.getsockname()[1]
        self.tls = tls
        ssl: dict[str, Any] = {}
        self.ca_path: Path | None = None
        if tls:
            self.ca_path, cert, key = ensure_certificates(self.data_dir / "pki",
                                                                [host, *tls_sans])
            ssl = {"ssl_certfile": str(cert), "ssl_keyfile": str(key)}
        self.store = Store(self.data_dir / DB_NAME, event_log_size=event_log_size, sync=sync,
                           event_log_bytes=event_log_bytes, max_object_bytes=max_body_bytes,
                           transformer=Transformer.for_data_dir(self.data_dir),
                           commit_thread=commit_thread)
        self.space = space.SpaceQuota(self.data_dir, storage_quota_bytes,
                                      storage_reserve_bytes)
        self.space.load(self.store.db)
        self.store.space = self.space
        if tenant_quotas:  # the quotas the plug-ins set (tenancy: the VirtualCluster's)
            self.store.usage = TenantUsage()
            self.store.usage.load(self.store.db)
            self.store.usage.exempt = platform_write
        self.tokens = TokenFile(self.data_dir / TOKENS_NAME)
        # the cluster CA signs the client certificate the API server shows node agents; their
        # serving certificates come from a CA of their own, trusted only on the way to them
        cluster_ca, node_cert, node_key = ensure_node_client(self.data_dir / "pki")
        node_ca = ensure_node_ca(self.data_dir / "pki")
        root_ca = (self.ca_path or cluster_ca).read_text()
        self.api = Api(self.store, root_ca_pem=root_ca)
        self.api.publish_root_ca_everywhere()
        builtin_kinds.complete_stored_nodes(self.store, list(self.api.registries))
        self.api.publish_api_endpoints(host, self.port)
        components.bootstrap_roles(self.api)
        signer = TokenSigner(self.data_dir / "pki" / SA_SIGNING_KEY)
        self.app = App(self.api, self.tokens, f"{host}:{self.port}",
                       bookmark_interval=bookmark_interval, event_ttl=event_ttl,
                       max_body_bytes=max_body_bytes,
                       anonymous_metrics=anonymous_metrics, signer=signer,
                       node_signer=NodeServingSigner(self.data_dir / "pki"),
                       node_tls=client_context(node_ca, node_cert, node_key),
                       fairness=fairness, watch_backlog_bytes=watch_backlog_bytes)
        self.space.register(self.app.metrics.registry)
        if self.store.usage is not None:
            self.store.usage.register(self.app.metrics.registry)
        # the server's own safeguards first: who asked for a certificate, what a node reaches
        self.api.admission_hooks += [certificates.RequesterAdmission(),
                                     noderestriction.NodeRestriction()]
        # mutating webhooks before every other hook sees the object (as Kubernetes orders
        # mutating admission before validation)
        self.api.admission_hooks.insert(0, MutatingWebhooks())
        self.app.filters.request_policies.append(noderestriction.NodeAuthorizer(self.api))
        for plugin in plugins:  # what the composing process plugs in (tenancy, dashboard)
            self.app.install(plugin(self.api))
        config = uvicorn.Config(self.app, log_level="warning", access_log=False,
                                lifespan="on", timeout_keep_alive=120,
                                ws="wsproto", ws_per_message_deflate=False,
                                timeout_graceful_shutdown=2, **ssl)
        self._server = _Server(config, self.app, tls_handshake_timeout)
        self._thread: threading.Thread | None = None
        self.write_kubeconfig(self.data_dir / KUBECONFIG_NAME)

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{self.host}:{self.port}"

    @property
    def admin_token(self) -> str:
        return self.tokens.admin_token

    def cluster_url(self, cluster: str = DEFAULT_CLUSTER) -> str:
        return self.url if cluster == DEFAULT_CLUSTER else f"{self.url}/clusters/{cluster}"

    def write_kubeconfig(self, path: Path | str, *, token: str | None = None,
                         user: str = "admin", cluster: str = DEFAULT_CLUSTER) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        ca = self.ca_path.read_bytes() if self.ca_path is not None else None
        cfg = kubeconfig(self.cluster_url(cluster), token or self.admin_token, user, ca_pem=ca)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(yaml.safe_dump(cfg, sort_keys=False))
        tmp.chmod(0o600)
        tmp.replace(path)
        return path

    def start(self, timeout: float = 15.0) -> ApiServer:
        self._thread = threading.Thread(target=self._run, name="gpushare-apiserver",
                                        daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the API server failed to start")
            if time.monotonic() > deadline:
                raise RuntimeError("the API server did not start in time")
            time.sleep(0.01)
        return self

    def _run(self) -> None:
        self._server.run(sockets=[self._sock])

    def serve_forever(self) -> None:
        """Serve until SIGINT/SIGTERM, then shut down cleanly and return."""
        try:
            self._server.run(sockets=[self._sock])
        except KeyboardInterrupt:
            pass  # uvicorn re-raises the signal it handled; the shutdown was already clean
        finally:
            self._close()

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self._close()

    def _close(self) -> None:
        try:
            self._sock.close()
        finally:
            self.store.close()
            self._lock.close()

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
