"""``gpushare node-daemon``: MPS and the GPU watchdog on a node the kubelet runs (a
DaemonSet); it never writes the Node and never runs a pod."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from gpushare.cli.kubeconfig import HELP as KUBECONFIG_HELP
from gpushare.cli.kubeconfig import kubeconfig_path


def node_daemon(
    node_name: Annotated[str | None, typer.Option(
        help="the Node this runs on (default: $NODE_NAME, from the downward API)")] = None,
    mps_directory: Annotated[Path, typer.Option(
        help="the node directory of the MPS daemons (<dir>/gpu<index>/pipe); the same path "
        "the webhook mounts into fractional pods")] = Path("/run/gpushare/mps"),
    kubeconfig: Annotated[str | None, typer.Option(help=KUBECONFIG_HELP)] = None,
    period: Annotated[float, typer.Option(help="seconds between watchdog passes")] = 2.0,
    compute_policy: Annotated[str, typer.Option(
        help="evict|off: a fractional pod whose processes escape MPS and keep its GPU busier "
        "than its share for --compute-passes passes")] = "evict",
    compute_passes: Annotated[int, typer.Option(help="passes in a row")] = 5,
    health_port: Annotated[int | None, typer.Option(
        help="serve /healthz, /livez and /readyz on this port (plain HTTP, for probes): "
        "ready while every GPU's MPS control daemon runs")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Run the MPS daemons and the GPU memory/compute watchdog for the kubelet's pods."""
    from gpushare.agent.gpu.mps import STOP_SIGNAL, MpsManager
    from gpushare.agent.gpu.nvml import NvmlUnavailable, PynvmlBackend, probe_inventory
    from gpushare.agent.kubelet_node import NodeWatchdog, evict_through_api, run
    from gpushare.cli.up import _setup_logging, _stop_on_signals
    from gpushare.kube.client import KubeClient

    _setup_logging(verbose)
    node = node_name or os.environ.get("NODE_NAME") or ""
    if not node:
        typer.echo("error: --node-name (or $NODE_NAME) is required", err=True)
        raise typer.Exit(2)
    if compute_policy not in ("evict", "off"):
        raise typer.BadParameter(f"{compute_policy!r}: evict or off",
                                 param_hint="--compute-policy")
    try:
        nvml = PynvmlBackend()
        inventory = probe_inventory(nvml)
    except NvmlUnavailable as exc:
        typer.echo(f"error: no GPU found through NVML ({exc})", err=True)
        raise typer.Exit(2) from None
    client = KubeClient.from_kubeconfig(kubeconfig_path(kubeconfig), pool_size=2)
    # The kubelet stops the pods (signals); terminate_client has no place to run here.
    mps = MpsManager(inventory.devices, mps_directory, stop_mode=STOP_SIGNAL)
    watchdog = NodeWatchdog(nvml, inventory, evict_through_api(client, node), mps,
                            compute_policy=compute_policy, compute_passes=compute_passes)
    if health_port is not None:
        from gpushare.kube.health import Health, serve_health

        def mps_up() -> str | None:
            down = [i for i, d in mps.daemons.items() if not d.alive()]
            return f"MPS control daemons of GPUs {down} not running" if down else None

        serve_health(Health(ready={"mps": mps_up}), health_port)
    try:
        run(client, node, inventory, watchdog, _stop_on_signals(), period)
    except RuntimeError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None
    finally:
        client.close()


def register(app: typer.Typer) -> None:
    app.command(name="node-daemon")(node_daemon)
