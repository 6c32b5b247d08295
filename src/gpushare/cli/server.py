"""`gpushare apiserver` and `gpushare kubeconfig`."""

from __future__ import annotations

import logging
import secrets
from pathlib import Path
from typing import Annotated

import typer
import yaml

DataDir = Annotated[Path, typer.Option("--data-dir", help="The API server's data directory "
                                                          "(state.db, tokens.yaml, "
                                                          "admin.kubeconfig).")]
Port = Annotated[int, typer.Option("--port", help="TCP port (0: any free port).")]
Host = Annotated[str, typer.Option("--host", help="Address to listen on.")]
Output = Annotated[Path | None, typer.Option("--output", "-o", help="Write to this file.")]
UserOpt = Annotated[str | None, typer.Option("--user", help="Issue a new token for this user.")]
Groups = Annotated[list[str] | None, typer.Option("--group", help="Groups of the new token.")]
Token = Annotated[str | None, typer.Option("--token", help="Use this token.")]
Cluster = Annotated[str, typer.Option("--cluster", help="Logical cluster to point at.")]
Server = Annotated[str | None, typer.Option("--server", help="Server URL (default: the one in "
                                                             "admin.kubeconfig).")]
ComponentOpt = Annotated[str | None, typer.Option(
    "--component", help="Write the kubeconfig of a control-plane component's own identity: "
    "'controllers' (system:gpushare-controllers, the roles of controllers/rbac.yaml) or "
    "'tenancy' (system:gpushare-tenancy, for `gpushare controllers --tenant-kubeconfig`).")]


def register(app: typer.Typer) -> None:
    """Add this module's commands to the top-level app."""
    app.command("apiserver")(apiserver)
    app.command("kubeconfig")(kubeconfig_cmd)


Sync = Annotated[str, typer.Option(
    "--sync", help="SQLite durability: 'full' (default: every commit fsynced, an acknowledged "
                   "write survives a power loss) or 'normal' (faster; survives a crash of the "
                   "process, a power loss may drop the last writes).")]
MaxBody = Annotated[int, typer.Option("--max-request-bytes",
                                      help="Largest request body (and stored object), bytes.")]
EventLogBytes = Annotated[int, typer.Option(
    "--event-log-bytes", help="Bound of the watch event log in bytes (besides 50,000 events).")]


QuotaBytes = Annotated[int, typer.Option(
    "--storage-quota-bytes", help="Space quota of the store: past it only deletes and writes "
    "that do not grow objects are accepted, until room is freed (default 2 GiB).")]
ReserveBytes = Annotated[int, typer.Option(
    "--storage-reserve-bytes", help="Free disk space kept: below it the store grows no more "
    "(default 256 MiB).")]
HandshakeTimeout = Annotated[float, typer.Option(
    "--tls-handshake-timeout", help="Seconds a client has to complete the TLS handshake; "
    "connections that do not are closed (default 10).")]
WatchBacklogBytes = Annotated[int, typer.Option(
    "--watch-backlog-bytes", help="Bytes of events one watch may have waiting to be sent: "
    "past it the watch is closed and its client re-lists (default 16 MiB; 0: no bound "
    "but 20,000 events).")]
FlowControl = Annotated[bool, typer.Option(
    "--flow-control/--no-flow-control", help="Per-tenant fairness: requests queued fairly "
    "per logical cluster with bounded concurrency, bulk work in slices (default on).")]
TlsSans = Annotated[list[str] | None, typer.Option(
    "--tls-san", help="Another name (DNS or IP) clients reach the server by, for its serving "
    "certificate: a Service's or Ingress's host name (repeatable).")]
AnonymousMetrics = Annotated[bool, typer.Option(
    "--anonymous-metrics", help="serve /metrics without a token (by default a token whose "
    "user may `get` the nonResourceURL /metrics is needed: the system:monitoring role)")]


def apiserver(data_dir: DataDir, port: Port = 6443, host: Host = "127.0.0.1",
              sync: Sync = "full", max_request_bytes: MaxBody = 3 * 1024 * 1024,
              event_log_bytes: EventLogBytes = 64 * 1024 * 1024,
              anonymous_metrics: AnonymousMetrics = False,
              storage_quota_bytes: QuotaBytes = 2 * 1024**3,
              storage_reserve_bytes: ReserveBytes = 256 * 1024**2,
              tls_handshake_timeout: HandshakeTimeout = 10.0,
              watch_backlog_bytes: WatchBacklogBytes = 16 * 1024 * 1024,
              flow_control: FlowControl = True, tls_san: TlsSans = None) -> None:
    """Run the Kubernetes-compatible API server in the foreground (Ctrl-C stops it)."""
    from gpushare.apiserver.http.server import DEFAULT_FAIRNESS
    from gpushare.cli.compose import api_server

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    if sync not in ("full", "normal"):
        typer.echo(f"error: --sync must be 'full' or 'normal', not {sync!r}", err=True)
        raise typer.Exit(2)
    try:
        server = api_server(data_dir, host, port, sync=sync,
                           max_body_bytes=max_request_bytes, event_log_bytes=event_log_bytes,
                           anonymous_metrics=anonymous_metrics,
                           storage_quota_bytes=storage_quota_bytes,
                           storage_reserve_bytes=storage_reserve_bytes,
                           tls_handshake_timeout=tls_handshake_timeout,
                           watch_backlog_bytes=watch_backlog_bytes,
                           fairness=DEFAULT_FAIRNESS if flow_control else None,
                           tls_sans=list(tls_san or ()))
    except (OSError, RuntimeError, ValueError) as e:
        typer.echo(f"error: cannot start the API server on {host}:{port}: {e}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"gpushare apiserver listening on {server.url}; "
               f"kubeconfig: {data_dir / 'admin.kubeconfig'}", err=True)
    server.serve_forever()


def kubeconfig_cmd(
    data_dir: DataDir,
    output: Output = None,
    user: UserOpt = None,
    groups: Groups = None,
    token: Token = None,
    cluster: Cluster = "root",
    server: Server = None,
    component: ComponentOpt = None,
) -> None:
    """Print (or write) a kubeconfig for the API server in DATA_DIR."""
    from gpushare.api.kubeconfig import kubeconfig
    from gpushare.apiserver.auth import components
    from gpushare.apiserver.auth.access import TokenFile
    from gpushare.apiserver.http.server import KUBECONFIG_NAME, TOKENS_NAME

    if component is not None and (component not in components.COMPONENTS or user):
        typer.echo(f"error: --component must be one of {', '.join(components.COMPONENTS)}"
                   f" and not combined with --user, not {component!r}", err=True)
        raise typer.Exit(2)
    tokens = TokenFile(data_dir / TOKENS_NAME)
    if server is None:
        admin_cfg = data_dir / KUBECONFIG_NAME
        if not admin_cfg.exists():
            typer.echo(f"error: {admin_cfg} does not exist; start the API server first or "
                       "pass --server", err=True)
            raise typer.Exit(1)
        cfg = yaml.safe_load(admin_cfg.read_text())
        server = str(cfg["clusters"][0]["cluster"]["server"]).split("/clusters/")[0]
    if cluster != "root":
        server = f"{server}/clusters/{cluster}"
    name = user or "admin"
    if component is not None:
        identity = components.COMPONENTS[component]
        name = identity.name
        token = components.component_token(tokens, identity)
    elif user is not None:
        token = token or secrets.token_urlsafe(32)
        # The new token is valid in the logical cluster it is issued for, nowhere else.
        tokens.add(token, user, list(groups or ()), [cluster])
    ca_path = data_dir / "pki" / "ca.crt"
    ca = ca_path.read_bytes() if ca_path.exists() else None
    text = yaml.safe_dump(kubeconfig(server, token or tokens.admin_token, name, ca_pem=ca),
                          sort_keys=False)
    if output is not None:
        output.write_text(text)
        output.chmod(0o600)
    else:
        typer.echo(text, nl=False)
