"""``gpushare webhook``: the mutating admission webhook for GPU fractions on kubelet nodes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpushare.cli.kubeconfig import HELP as KUBECONFIG_HELP
from gpushare.cli.kubeconfig import kubeconfig_path


def webhook(
    port: Annotated[int, typer.Option(help="HTTPS port of POST /mutate-pods")] = 8443,
    host: Annotated[str, typer.Option(help="address to listen on")] = "0.0.0.0",
    tls_cert: Annotated[Path | None, typer.Option(
        help="serving certificate (PEM); without it a self-signed one is made at start")] = None,
    tls_key: Annotated[Path | None, typer.Option(help="its key (PEM)")] = None,
    cert_dir: Annotated[Path, typer.Option(
        help="where the self-signed certificate is written")] = Path("/tmp/gpushare-webhook"),
    service: Annotated[str, typer.Option(help="the webhook's Service name (certificate "
                                         "name <service>.<namespace>.svc)")] = "gpushare-webhook",
    namespace: Annotated[str, typer.Option(help="the Service's namespace")] = "gpushare-system",
    configuration: Annotated[str | None, typer.Option(
        help="MutatingWebhookConfiguration whose caBundle gets the self-signed certificate")
    ] = None,
    kubeconfig: Annotated[str | None, typer.Option(help=KUBECONFIG_HELP)] = None,
    mps_directory: Annotated[str, typer.Option(
        help="the node directory of the MPS daemons' pipes, mounted into fractional pods")
    ] = "/run/gpushare/mps",
    health_port: Annotated[int | None, typer.Option(
        help="serve /healthz, /livez and /readyz on this port (plain HTTP, for probes)")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Serve the mutation that gives fractional pods their share ConfigMap and MPS mount."""
    from gpushare.cli.up import _setup_logging, _stop_on_signals
    from gpushare.webhook.server import WebhookServer, put_ca_bundle, self_signed

    _setup_logging(verbose)
    if (tls_cert is None) != (tls_key is None):
        typer.echo("error: --tls-cert and --tls-key go together", err=True)
        raise typer.Exit(2)
    if tls_cert is None or tls_key is None:
        names = [f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local",
                 "localhost"]
        tls_cert, tls_key = self_signed(cert_dir, names)
    if configuration:
        from gpushare.kube.client import KubeClient

        client = KubeClient.from_kubeconfig(kubeconfig_path(kubeconfig), pool_size=2)
        try:
            put_ca_bundle(client, configuration, tls_cert.read_bytes())
        finally:
            client.close()
    server = WebhookServer(host, port, tls_cert, tls_key, mps_directory)
    server.start()
    if health_port is not None:
        from gpushare.kube.health import Health, serve_health

        serve_health(Health(), health_port)
    typer.echo(f"gpushare webhook on https://{host}:{server.port}/mutate-pods")
    _stop_on_signals().wait()
    server.stop()


def register(app: typer.Typer) -> None:
    app.command()(webhook)
