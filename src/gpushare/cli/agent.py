"""`gpushare agent`: run this machine as a node of the control plane."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from gpushare.agent.agent import Agent
    from gpushare.agent.gpu.enforcement import Enforcement
    from gpushare.agent.gpu.nvml import PynvmlBackend
    from gpushare.agent.node.inventory import GpuInventory
    from gpushare.agent.runtime.logshim import LogLimits


def register(app: typer.Typer) -> None:
    app.command(name="agent")(agent)


# The options whose help is long, named here so that `agent`'s signature stays readable.
StopPodsOnExit = Annotated[bool, typer.Option(
    "--stop-pods-on-exit/--keep-pods-on-exit",
    help="on SIGTERM/Ctrl-C, end the pods' processes (the pods stay and restart by their "
    "policy with the next agent) or leave them running for it to adopt")]
MetricsInterval = Annotated[float, typer.Option(
    help="seconds between the measurements and Prometheus figures sent to the control plane "
    "(/metrics, kubectl top; 0: none)")]
Sandbox = Annotated[str, typer.Option(
    help="auto|bwrap|setuid|none: how pods are isolated (auto: bubblewrap namespaces when "
    "they work, else a per-pod user; none when the agent is not root)")]
SandboxReadOnly = Annotated[list[Path] | None, typer.Option(
    "--sandbox-read-only", help="a host path under /tmp, /run, /root or /home that pods may "
    "read (bound read-only into every bwrap sandbox; repeatable). Nothing a pod names itself "
    "is bound")]
PodNetwork = Annotated[str, typer.Option(
    help="auto|isolated|host: each pod in a network namespace of its own on the node's bridge "
    "(auto: when the node can; else pods share the node's network, the Node says so and "
    "tenants' pods are refused)")]
PodCidr = Annotated[str, typer.Option(
    help="the node's pod addresses, e.g. 10.244.1.0/24 (auto: 10.244.<n>.0/24 with an n no "
    "other agent here uses)")]
HealthPort = Annotated[int | None, typer.Option(
    help="serve /healthz, /livez and /readyz on this port (plain HTTP, for probes): ready "
    "once the Node is registered")]
Cgroups = Annotated[str, typer.Option(
    help="auto|required|none: memory, CPU and pids limits of pods in cgroups (auto: when the "
    "host allows; without them tenants' pods and pods with limits are refused)")]
CgroupParent = Annotated[str | None, typer.Option(
    help="cgroup for the pods' cgroups, relative to the agent's own or absolute (default: "
    "gpushare-<digest> under the agent's own)")]
PodPidsLimit = Annotated[int, typer.Option(
    help="most processes per pod (the kubelet's podPidsLimit; 0: no limit)")]
LogMaxSize = Annotated[str, typer.Option(
    help="rotate a container's log at this size (containerLogMaxSize)")]
LogMaxFiles = Annotated[int, typer.Option(
    help="log files kept per container run (containerLogMaxFiles)")]
StorageCheck = Annotated[float, typer.Option(
    help="seconds between measurements of the pods' local storage (ephemeral-storage limits, "
    "emptyDir sizeLimit, disk pressure)")]
DiskMinFree = Annotated[str, typer.Option(
    help="disk pressure when the data directory's file system has less than this free (the "
    "kubelet's nodefs.available)")]
VolumeRefresh = Annotated[float, typer.Option(
    help="seconds between re-reads of the configMaps, Secrets and tokens mounted as volumes")]
MpsStop = Annotated[str, typer.Option(
    help="signal|terminate-client: how a pod on a shared (MPS) GPU is stopped. signal: "
    "SIGTERM, then SIGKILL after its grace period. terminate-client: MPS terminate_client of "
    "the pod's clients first, then the signals; on an H100 with driver 580.159.04 that made "
    "the MPS server fail and take the neighbour pods down, where signals alone killed none "
    "(docs/performance.md)")]


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
    restart_backoff: Annotated[float, typer.Option(help="first restart back-off, seconds")] = 10.0,
    stop_pods_on_exit: StopPodsOnExit = True,
    metrics_interval: MetricsInterval = 5.0,
    metrics_port: Annotated[
        int | None, typer.Option(help="also serve the figures on this port's /metrics")
    ] = None,
    health_port: HealthPort = None,
    sandbox: Sandbox = "auto",
    cgroups: Cgroups = "auto",
    cgroup_parent: CgroupParent = None,
    pod_pids_limit: PodPidsLimit = 1024,
    container_log_max_size: LogMaxSize = "10Mi",
    container_log_max_files: LogMaxFiles = 5,
    storage_check: StorageCheck = 10.0,
    disk_min_free: DiskMinFree = "10%",
    volume_refresh: VolumeRefresh = 15.0,
    sandbox_read_only: SandboxReadOnly = None,
    pod_network: PodNetwork = "auto",
    pod_cidr: PodCidr = "auto",
    mps_stop: MpsStop = "signal",
) -> None:
    """Register this machine as a Node and run the pods bound to it as local processes."""
    from gpushare import __version__
    from gpushare.agent.agent import Agent, AgentConfig, default_hostname
    from gpushare.agent.node.inventory import host_resources
    from gpushare.agent.runtime.cgroups import CgroupError
    from gpushare.agent.runtime.network.addressing import NetworkError
    from gpushare.agent.runtime.podresources import ResourceConfig
    from gpushare.agent.runtime.sandbox import SandboxError
    from gpushare.agent.runtime.supervisor import SupervisorConfig
    from gpushare.kube.client import KubeClient

    logging.basicConfig(level=logging.INFO, format="%(asctime)s agent %(levelname)s %(message)s")
    stop_mode = _stop_mode(mps_stop)
    name = node_name or default_hostname()
    data_dir = data_dir.resolve()
    inventory, nvml = _inventory(name, gpus)
    chosen = _enforcement(enforcement, inventory, nvml is not None, data_dir, stop_mode)
    log_limits = _log_limits(container_log_max_size, container_log_max_files)
    min_free = _min_free(disk_min_free)
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
    try:
        runner = Agent(kube, config, inventory, host_resources(), chosen, nvml)
    except (SandboxError, CgroupError, NetworkError) as exc:
        typer.echo(f"error: {exc}", err=True)
        if chosen.mps is not None:
            chosen.mps.stop_all()
        raise typer.Exit(2) from None
    _run(runner, kube.host, metrics_port, health_port, stop_pods_on_exit)


def _stop_mode(value: str) -> str:
    from gpushare.agent.gpu.mps import MpsStopError, parse_stop_mode

    try:
        return parse_stop_mode(value)
    except MpsStopError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def _log_limits(max_size: str, max_files: int) -> LogLimits:
    from gpushare.agent.runtime.logshim import LogLimits
    from gpushare.api import quantity
    from gpushare.api.quantity import QuantityError

    try:
        return LogLimits(quantity.to_int(max_size), max_files)
    except (ValueError, QuantityError) as exc:
        raise typer.BadParameter(str(exc), param_hint="--container-log-max-size/-files") from None


def _min_free(value: str) -> float:
    try:
        min_free = float(value.rstrip("%")) / 100
        if not 0 <= min_free <= 1 or not value.endswith("%"):
            raise ValueError
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not a percentage such as 10%",
                                 param_hint="--disk-min-free") from None
    return min_free


def _inventory(name: str, gpus: str | None) -> tuple[GpuInventory, PynvmlBackend | None]:
    """The declared GPUs (`--gpus`), or those NVML finds, and NVML where it was used."""
    from gpushare.agent.gpu.nvml import NvmlUnavailable, PynvmlBackend, probe_inventory
    from gpushare.agent.node.inventory import declared_gpus
    from gpushare.model.gpu_products import GpuSpecError

    if gpus:
        try:
            return declared_gpus(name, gpus), None
        except GpuSpecError as exc:
            raise typer.BadParameter(str(exc), param_hint="--gpus") from None
    try:
        nvml = PynvmlBackend()
        return probe_inventory(nvml), nvml
    except NvmlUnavailable as exc:
        typer.echo(
            f"error: no GPU found through NVML ({exc}); on a machine without GPUs "
            "declare them, e.g. --gpus 1xL40S",
            err=True,
        )
        raise typer.Exit(2) from None


def _enforcement(mode: str, inventory: GpuInventory, nvml_ok: bool, data_dir: Path,
                 stop_mode: str) -> Enforcement:
    from gpushare.agent.gpu.enforcement import EnforcementError, choose
    from gpushare.agent.gpu.mps import MpsManager
    from gpushare.agent.runtime.sandbox import mps_base

    try:
        chosen = choose(
            mode,
            inventory,
            nvml_ok,
            lambda: MpsManager(inventory.devices, mps_base(data_dir), stop_mode=stop_mode),
        )
    except EnforcementError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    log = logging.getLogger("gpushare.agent")
    for note in chosen.notes:
        log.warning(note)
    if chosen.mps is not None:
        log.info("MPS: pods on a shared GPU are stopped with --mps-stop %s",
                 chosen.mps.stop_mode)
    return chosen


def _run(runner: Agent, host: str, metrics_port: int | None, health_port: int | None,
         stop_pods_on_exit: bool) -> None:
    """Start the agent, serve until SIGTERM/Ctrl-C, then stop it."""
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    if metrics_port is not None:
        from gpushare.kube.metrics_push import serve

        serve(runner.metrics.registry, metrics_port)
    name, inventory, chosen = runner.config.node_name, runner.inventory, runner.enforcement
    registered = threading.Event()
    if health_port is not None:
        from gpushare.kube.health import Health, serve_health

        serve_health(Health(ready={"node-registered": lambda: None if registered.is_set()
                                   else f"node {name} is not registered yet"}), health_port)
    try:
        runner.start()
    except Exception as exc:
        typer.echo(f"error: could not register node {name} with the API at "
                   f"{host}: {exc}", err=True)
        if chosen.mps is not None:
            chosen.mps.stop_all()
        raise typer.Exit(1) from None
    registered.set()
    typer.echo(
        f"node {name}: {inventory.count} GPU(s){' (declared)' if inventory.declared else ''}, "
        f"enforcement {chosen.annotation}, node endpoint on https port {runner.node_port}, "
        f"sandbox {runner.sandbox.mode}, limits: {runner.resources.limits.reason}; "
        f"pod network: {runner.network.describe()}"
    )
    while not done.wait(1.0):
        pass
    runner.stop(stop_pods=stop_pods_on_exit)
