"""`gpushare agent`: run this machine as a node of the control plane."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    app.command(name="agent")(agent)


def agent(
    kubeconfig: Annotated[Path, typer.Option(help="kubeconfig of the control plane")],
    node_name: Annotated[
        str | None, typer.Option(help="name of this Node (default: the hostname)")
    ] = None,
    gpus: Annotated[
        str | None,
        typer.Option(help="declare fake GPUs instead of probing NVML, e.g. 1xL40S or 8xH100"),
    ] = None,
    data_dir: Annotated[
        Path, typer.Option(help="pod directories, logs and MPS pipes live here")
    ] = Path("gpushare-agent"),
    port: Annotated[int, typer.Option(
        help="port of the HTTPS node endpoint: logs, exec, attach, port-forward (0: any free "
             "port)")] = 0,
    address: Annotated[str, typer.Option(help="InternalIP written on the Node")] = "127.0.0.1",
    enforcement: Annotated[
        str, typer.Option(help="auto|mps|watchdog|none: how GPU shares are enforced")
    ] = "auto",
    heartbeat: Annotated[float, typer.Option(help="seconds between heartbeats")] = 5.0,
    restart_backoff: Annotated[
        float, typer.Option(help="first restart back-off, seconds")
    ] = 10.0,
    stop_pods_on_exit: Annotated[
        bool,
        typer.Option(
            "--stop-pods-on-exit/--keep-pods-on-exit",
            help="on SIGTERM/Ctrl-C, end the pods' processes (the pods stay and restart by "
            "their policy with the next agent) or leave them running for it to adopt",
        ),
    ] = True,
    metrics_interval: Annotated[
        float, typer.Option(help="seconds between the measurements and Prometheus figures "
                            "sent to the control plane (/metrics, kubectl top; 0: none)")
    ] = 5.0,
    metrics_port: Annotated[
        int | None, typer.Option(help="also serve the figures on this port's /metrics")
    ] = None,
    sandbox: Annotated[
        str, typer.Option(help="auto|bwrap|setuid|none: how pods are isolated (auto: "
                          "bubblewrap namespaces when they work, else a per-pod user; "
                          "none when the agent is not root)")
    ] = "auto",
    cgroups: Annotated[
        str, typer.Option(help="auto|required|none: memory, CPU and pids limits of pods in "
                          "cgroups (auto: when the host allows; without them tenants' pods "
                          "and pods with limits are refused)")
    ] = "auto",
    cgroup_parent: Annotated[
        str | None, typer.Option(help="cgroup for the pods' cgroups, relative to the agent's "
                                 "own or absolute (default: gpushare-<digest> under the "
                                 "agent's own)")
    ] = None,
    pod_pids_limit: Annotated[
        int, typer.Option(help="most processes per pod (the kubelet's podPidsLimit; 0: no "
                          "limit)")
    ] = 1024,
    container_log_max_size: Annotated[
        str, typer.Option(help="rotate a container's log at this size (containerLogMaxSize)")
    ] = "10Mi",
    container_log_max_files: Annotated[
        int, typer.Option(help="log files kept per container run (containerLogMaxFiles)")
    ] = 5,
    storage_check: Annotated[
        float, typer.Option(help="seconds between measurements of the pods' local storage "
                            "(ephemeral-storage limits, emptyDir sizeLimit, disk pressure)")
    ] = 10.0,
    disk_min_free: Annotated[
        str, typer.Option(help="disk pressure when the data directory's file system has less "
                          "than this free (the kubelet's nodefs.available)")
    ] = "10%",
    volume_refresh: Annotated[
        float, typer.Option(help="seconds between re-reads of the configMaps, Secrets and "
                            "tokens mounted as volumes")
    ] = 15.0,
    sandbox_read_only: Annotated[
        list[Path] | None, typer.Option(
            "--sandbox-read-only", help="a host path under /tmp, /run, /root or /home that "
            "pods may read (bound read-only into every bwrap sandbox; repeatable). Nothing a "
            "pod names itself is bound")
    ] = None,
    pod_network: Annotated[
        str, typer.Option(help="auto|isolated|host: each pod in a network namespace of its "
                          "own on the node's bridge (auto: when the node can; else pods share "
                          "the node's network, the Node says so and tenants' pods are "
                          "refused)")
    ] = "auto",
    pod_cidr: Annotated[
        str, typer.Option(help="the node's pod addresses, e.g. 10.244.1.0/24 (auto: "
                          "10.244.<n>.0/24 with an n no other agent here uses)")
    ] = "auto",
) -> None:
    """Register this machine as a Node and run the pods bound to it as local processes."""
    from gpushare import __version__
    from gpushare.agent.agent import Agent, AgentConfig, default_hostname
    from gpushare.agent.gpu.enforcement import EnforcementError, choose
    from gpushare.agent.gpu.mps import MpsManager
    from gpushare.agent.gpu.nvml import NvmlUnavailable, PynvmlBackend, probe_inventory
    from gpushare.agent.node.inventory import declared_gpus, host_resources
    from gpushare.agent.runtime.logshim import LogLimits
    from gpushare.agent.runtime.podresources import ResourceConfig
    from gpushare.agent.runtime.sandbox import mps_base
    from gpushare.agent.runtime.supervisor import SupervisorConfig
    from gpushare.api import quantity
    from gpushare.api.quantity import QuantityError
    from gpushare.kube.client import KubeClient
    from gpushare.model.gpu_products import GpuSpecError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s agent %(levelname)s %(message)s")
    name = node_name or default_hostname()
    data_dir = data_dir.resolve()
    nvml = None
    if gpus:
        try:
            inventory = declared_gpus(name, gpus)
        except GpuSpecError as exc:
            raise typer.BadParameter(str(exc), param_hint="--gpus") from None
    else:
        try:
            nvml = PynvmlBackend()
            inventory = probe_inventory(nvml)
        except NvmlUnavailable as exc:
            typer.echo(
                f"error: no GPU found through NVML ({exc}); on a machine without GPUs "
                "declare them, e.g. --gpus 1xL40S",
                err=True,
            )
            raise typer.Exit(2) from None
    try:
        chosen = choose(
            enforcement,
            inventory,
            nvml is not None,
            lambda: MpsManager(inventory.devices, mps_base(data_dir)),
        )
    except EnforcementError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    for note in chosen.notes:
        logging.getLogger("gpushare.agent").warning(note)
    try:
        log_limits = LogLimits(quantity.to_int(container_log_max_size), container_log_max_files)
    except (ValueError, QuantityError) as exc:
        raise typer.BadParameter(str(exc), param_hint="--container-log-max-size/-files") from None
    try:
        min_free = float(disk_min_free.rstrip("%")) / 100
        if not 0 <= min_free <= 1 or not disk_min_free.endswith("%"):
            raise ValueError
    except ValueError:
        raise typer.BadParameter(f"{disk_min_free!r} is not a percentage such as 10%",
                                 param_hint="--disk-min-free") from None
    config = AgentConfig(
        node_name=name,
        data_dir=data_dir,
        address=address,
        port=port,
        heartbeat_s=heartbeat,
        supervisor=SupervisorConfig(host_ip=address, backoff_base_s=restart_backoff,
                                    log_limits=log_limits),
        version=__version__,
        telemetry_s=metrics_interval,
        sandbox=sandbox,
        sandbox_hidden=(kubeconfig.resolve().parent,),
        resources=ResourceConfig(cgroups=cgroups, cgroup_parent=cgroup_parent,
                                 pod_pids_limit=pod_pids_limit or None,
                                 storage_check_s=storage_check, disk_min_free=min_free,
                                 volume_refresh_s=volume_refresh),
        sandbox_read_only=tuple(sandbox_read_only or ()),
        pod_network=pod_network,
        pod_cidr=pod_cidr,
    )
    try:
        kube = KubeClient.from_kubeconfig(str(kubeconfig))
    except Exception as exc:
        typer.echo(f"error: --kubeconfig {kubeconfig}: {exc}", err=True)
        raise typer.Exit(2) from None
    from gpushare.agent.runtime.cgroups import CgroupError
    from gpushare.agent.runtime.network.addressing import NetworkError
    from gpushare.agent.runtime.sandbox import SandboxError

    try:
        runner = Agent(kube, config, inventory, host_resources(), chosen, nvml)
    except (SandboxError, CgroupError, NetworkError) as exc:
        typer.echo(f"error: {exc}", err=True)
        if chosen.mps is not None:
            chosen.mps.stop_all()
        raise typer.Exit(2) from None
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    if metrics_port is not None:
        from gpushare.kube.metrics_push import serve

        serve(runner.metrics.registry, metrics_port)
    try:
        runner.start()
    except Exception as exc:
        typer.echo(f"error: could not register node {name} with the API at "
                   f"{kube.host}: {exc}", err=True)
        if chosen.mps is not None:
            chosen.mps.stop_all()
        raise typer.Exit(1) from None
    typer.echo(
        f"node {name}: {inventory.count} GPU(s){' (declared)' if inventory.declared else ''}, "
        f"enforcement {chosen.annotation}, node endpoint on https port {runner.node_port}, "
        f"sandbox {runner.sandbox.mode}, limits: {runner.resources.limits.reason}; "
        f"pod network: {runner.network.describe()}"
    )
    while not done.wait(1.0):
        pass
    runner.stop(stop_pods=stop_pods_on_exit)
