"""``gpushare up``, ``gpushare controllers`` and ``gpushare node add``."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpushare.api.contracts import DEFAULT_QUEUE as DEFAULT_QUEUE_NAME
from gpushare.api.contracts import GPU_RESOURCE
from gpushare.api.objects import Meta
from gpushare.cli import helpformat
from gpushare.cli.kubeconfig import HELP as KUBECONFIG_HELP
from gpushare.cli.kubeconfig import kubeconfig_path

if TYPE_CHECKING:
    from gpushare.apiserver.http.server import ApiServer

log = logging.getLogger("gpushare.up")



def _stop_on_signals() -> threading.Event:
    """An event set by Ctrl-C or SIGTERM."""
    stop = threading.Event()

    def handler(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    return stop


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def _controller_health(elector: Any, running: dict[str, Any]) -> Any:
    """The controllers' probes: live while the leader renews in time; ready once it
    follows its leader Lease and, while it leads (or without election), its caches have
    synced and the controllers run. A standby that follows the Lease is ready: it can take
    over, and a rolling update may go on."""
    from gpushare.kube.health import Health

    def caches() -> str | None:
        if elector is not None and not elector.leading.is_set():
            return None  # a standby watches nothing but the Lease
        return None if running.get("set") is not None else "the caches have not synced yet"

    health = Health()
    health.ready["informers-synced"] = caches
    if elector is not None:
        health.ready["leader-election"] = elector.watch_problem
        health.live["leader-election"] = elector.renew_problem
    return health


def controllers(
    kubeconfig: Annotated[str | None, typer.Option(help=KUBECONFIG_HELP)] = None,
    only: Annotated[
        list[str] | None,
        typer.Option(help="run only these controllers (repeatable): pod-grouper, "
                     "job-controller, replicaset-controller, deployment-controller, "
                     "replicationcontroller-controller, endpoints-controller, "
                     "disruption-controller, cronjob-controller, statefulset-controller, "
                     "daemonset-controller, scheduler, queue-status, podgroup-status, "
                     "max-runtime, static-node-pods, node-lifecycle, pod-gc"),
    ] = None,
    scheduler_name: Annotated[
        list[str] | None,
        typer.Option(help="schedulerName values to serve (repeatable; default gpushare and "
                     "kai-scheduler)"),
    ] = None,
    scheduler_config: Annotated[
        Path | None,
        typer.Option(help="YAML with the scenario format's `actions` and `config` keys "
                     "(compat: kai, placement, staleness, ...)"),
    ] = None,
    metrics_interval: Annotated[
        float, typer.Option(help="seconds between pushes of the controllers' Prometheus "
                            "figures to the control plane's /metrics (0: none)")
    ] = 5.0,
    metrics_port: Annotated[
        int | None, typer.Option(help="also serve them on this port's /metrics")
    ] = None,
    health_port: Annotated[int | None, typer.Option(
        help="serve /healthz, /livez and /readyz on this port (plain HTTP, for probes): "
             "ready once the leader Lease is followed and, while leading, the caches synced")
    ] = None,
    tenant_kubeconfig: Annotated[str | None, typer.Option(
        help="credentials the virtual-cluster controller uses inside tenant clusters "
        "(default: --kubeconfig's)")] = None,
    gpu_share_configmaps: Annotated[bool, typer.Option(
        "--gpu-share-configmaps", help="kubelet nodes: before binding a pod that asks for a "
        "GPU fraction, write its ConfigMap of GPU and MPS limits (read through the envFrom "
        "the gpushare webhook adds)")] = False,
    leader_elect: Annotated[bool, typer.Option(
        "--leader-elect", help="run only while holding a coordination.k8s.io Lease, so that"
        " several replicas can run with one active")] = False,
    leader_elect_resource_name: Annotated[str, typer.Option(
        help="the Lease's name")] = "gpushare-controllers",
    leader_elect_resource_namespace: Annotated[str, typer.Option(
        help="the Lease's namespace")] = "kube-system",
    leader_elect_lease_duration: Annotated[float, typer.Option(
        help="seconds a silent holder keeps the Lease")] = 15.0,
    leader_elect_renew_deadline: Annotated[float, typer.Option(
        help="seconds the holder may fail to renew before it stops")] = 10.0,
    leader_elect_retry_period: Annotated[float, typer.Option(
        help="seconds between attempts to acquire or renew")] = 2.0,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Run all controllers in one process (pod-grouper, workloads, scheduler, queue status)."""
    from gpushare.api.contracts import SCHEDULER_NAMES
    from gpushare.controller_manager import DEFAULT, start_controllers
    from gpushare.controllers.scheduling.scheduler_config import (
        SchedulerConfigError,
        load_scheduler_config,
    )

    _setup_logging(verbose)
    path = kubeconfig_path(kubeconfig)
    config = None
    if scheduler_config is not None:
        try:
            config = load_scheduler_config(scheduler_config)
        except SchedulerConfigError as error:
            typer.echo(f"error: --scheduler-config {error}", err=True)
            raise typer.Exit(2) from None
    stop = _stop_on_signals()
    enabled = tuple(only) if only else DEFAULT
    elector = None
    if leader_elect:
        from gpushare.kube.client import KubeClient
        from gpushare.kube.leader import LeaderElectionConfig, LeaderElector

        elector = LeaderElector(KubeClient.from_kubeconfig(path, pool_size=2), LeaderElectionConfig(
            name=leader_elect_resource_name, namespace=leader_elect_resource_namespace,
            lease_duration=leader_elect_lease_duration,
            renew_deadline=leader_elect_renew_deadline,
            retry_period=leader_elect_retry_period,
        ))
        log.info("leader election: %s waiting for %s/%s", elector.identity,
                 leader_elect_resource_namespace, leader_elect_resource_name)
    state: dict[str, Any] = {}
    if health_port is not None:
        from gpushare.kube.health import serve_health

        serve_health(_controller_health(elector, state), health_port)
        log.info("serving /healthz and /readyz on port %d", health_port)
    if elector is not None and not elector.acquire(stop):
        return
    try:
        running = start_controllers(
            path, enabled=enabled,
            scheduler_names=tuple(scheduler_name) if scheduler_name else SCHEDULER_NAMES,
            scheduler_config=config,
            metrics_push_interval=metrics_interval or None, metrics_port=metrics_port,
            tenant_kubeconfig=tenant_kubeconfig, gpu_share_configmaps=gpu_share_configmaps,
        )
    except (ValueError, TimeoutError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None
    state["set"] = running
    log.info("controllers running: %s", ", ".join(running.controllers))
    if elector is not None:
        def on_lost() -> None:
            # Another replica may be working already: stop acting at once (no bind after
            # this), as client-go's users exit.
            typer.echo("error: lost the leader Lease; exiting", err=True)
            os._exit(1)

        threading.Thread(target=elector.keep, args=(stop, on_lost), name="leader-elect",
                         daemon=True).start()
    stop.wait()
    log.info("stopping controllers")
    running.stop()
    if elector is not None:
        elector.release()


node_app = typer.Typer(rich_markup_mode=helpformat.MARKUP,
                       help="Nodes without an agent (declared GPUs).", no_args_is_help=True)


@node_app.command("add")
def node_add(
    name: Annotated[str, typer.Argument(help="node name")],
    gpus: Annotated[str | None, typer.Option(help="declared GPUs, COUNTxPRODUCT (8xH100)")] = None,
    cpu: Annotated[str, typer.Option(help="CPU cores (quantity)")] = "64",
    memory: Annotated[str, typer.Option(help="memory (quantity)")] = "512Gi",
    label: Annotated[list[str] | None, typer.Option(help="KEY=VALUE (repeatable)")] = None,
    kubeconfig: Annotated[str | None, typer.Option(help=KUBECONFIG_HELP)] = None,
    no_taint: Annotated[bool, typer.Option(
        "--no-taint", help="leave off the gpushare.io/no-agent:NoSchedule taint: every pod may"
        " be bound here (and stays Pending, nothing runs it); for scheduling tests")] = False,
) -> None:
    """Register a node with declared GPUs and no agent; the controllers keep it Ready.

    It is tainted gpushare.io/no-agent=true:NoSchedule: only pods that tolerate it land."""
    from gpushare.controllers.events import now_rfc3339
    from gpushare.controllers.nodes.static_nodes import (
        NodeSpecError,
        parse_labels,
        register_static_node,
        static_node,
    )
    from gpushare.kube.client import ApiError, KubeClient

    try:
        body = static_node(name, gpus, cpu, memory, parse_labels(label or []), now_rfc3339(),
                           taint=not no_taint)
    except NodeSpecError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    client = KubeClient.from_kubeconfig(kubeconfig_path(kubeconfig))
    try:
        register_static_node(client, body)
    except ApiError as error:
        typer.echo(f"error: node {name}: {error}", err=True)
        raise typer.Exit(1) from None
    finally:
        client.close()
    capacity = body["status"]["capacity"]
    typer.echo(
        f"node/{name} registered: {capacity.get('nvidia.com/gpu', '0')} GPU(s)"
        f" {Meta.of(body).labels.get('nvidia.com/gpu.product', '')},"
        f" cpu {capacity['cpu']}, memory {capacity['memory']}"
    )


MAX_RESTARTS = 5  # restarts of one child within RESTART_WINDOW_SECONDS before up gives up
RESTART_WINDOW_SECONDS = 60.0
STARTUP_SECONDS = 30.0  # how long up waits for its children to come up before saying so
LOG_TAIL_LINES = 20  # lines of a failing child's log shown on the terminal
DECLARED_WITHOUT_GPU = "1xL40S"  # what the agent declares on a machine without a GPU


def _gpus_for_agent(gpus: str | None) -> str | None:
    """``--gpus``, else None when NVML finds GPUs, else a declared GPU (said on the
    terminal: the agent would otherwise exit at once, machine after machine)."""
    if gpus:
        return gpus
    from gpushare.agent.gpu.nvml import NvmlUnavailable, PynvmlBackend

    try:
        PynvmlBackend().close()
        return None
    except NvmlUnavailable as error:
        typer.echo(f"no GPU found through NVML ({error}): the agent declares a fake "
                   f"{DECLARED_WITHOUT_GPU} (choose with --gpus)", err=True)
        return DECLARED_WITHOUT_GPU


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _report_failure(name: str, proc: subprocess.Popen[bytes], log_path: Path, why: str) -> None:
    typer.echo(f"error: {name} {why} (exit code {proc.returncode}); the end of {log_path}:",
               err=True)
    tail = log_tail(log_path)
    typer.echo("\n".join(f"  | {line}" for line in tail.splitlines()) or "  (empty)",
               err=True)


def _wait_until_up(
    kubeconfig: Path, node: str | None, children: dict[str, subprocess.Popen[bytes]],
    stop: threading.Event,
) -> str | None:
    """Wait until the agent's Node is Ready (when there is an agent) and every child is
    still running; the name of a child that exited first, else None."""
    from gpushare.kube.client import NODES, KubeClient

    client = KubeClient.from_kubeconfig(str(kubeconfig), pool_size=1)
    deadline = time.monotonic() + STARTUP_SECONDS
    try:
        while not stop.is_set():
            for name, proc in children.items():
                if proc.poll() is not None:
                    return name
            if node is None or time.monotonic() > deadline:
                return None
            try:
                obj = client.get(NODES.item(node)) or {}
            except Exception:
                obj = {}
            conditions = (obj.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
                _say_isolation(node, conditions)
                return None
            stop.wait(0.2)
        return None
    finally:
        client.close()


ISOLATION_CONDITIONS = ("PodSandbox", "PodLimits")  # the agent's; False: less isolation


def _say_isolation(node: str, conditions: list[dict[str, object]]) -> None:
    """Print the node's pod network, loudly when pods share the node's network, and warn of
    each isolation the agent says it cannot give pods (no sandbox, no cgroup limits)."""
    for condition in conditions:
        kind, status = condition.get("type"), condition.get("status")
        if kind == "PodNetworkIsolated" and status == "True":
            typer.echo(f"node {node}: pod network {condition.get('message')}")
        elif kind == "PodNetworkIsolated":
            typer.echo(f"warning: node {node}: pods are not isolated: "
                       f"{condition.get('message')}", err=True)
        elif kind in ISOLATION_CONDITIONS and status == "False":
            typer.echo(f"warning: node {node}: {kind} is False ({condition.get('reason')}): "
                       f"{condition.get('message')}", err=True)


DEFAULT_QUEUE = {
    "apiVersion": "scheduling.run.ai/v2",
    "kind": "Queue",
    "metadata": {"name": DEFAULT_QUEUE_NAME},
    "spec": {"resources": {r: {"quota": 0, "limit": -1, "overQuotaWeight": 1}
                           for r in ("gpu", "cpu", "memory")}},
}


def _ensure_default_queue(kubeconfig: str) -> None:
    """Workloads without a ``kai.scheduler/queue`` label land in ``default-queue``: on a
    fresh control plane it exists (no quota, no limit), so ``kubectl create job`` runs."""
    from gpushare.kube.client import QUEUES, ApiError, KubeClient

    client = KubeClient.from_kubeconfig(kubeconfig, pool_size=1)
    try:
        client.create(QUEUES.collection(), DEFAULT_QUEUE)
    except ApiError as error:
        if error.status != 409:
            raise
    finally:
        client.close()


queue_app = typer.Typer(rich_markup_mode=helpformat.MARKUP,
                        help="Queues: create them and see their shares.",
                        no_args_is_help=True)

RESOURCE_HELP = "QUOTA[:LIMIT[:WEIGHT]], -1 for unlimited (default 0:-1:1)"


def parse_share(option: str, text: str | None) -> dict[str, float]:
    """``0.33``, ``0.33:1`` or ``0.33:1:2`` → quota, limit, overQuotaWeight."""
    values = {"quota": 0.0, "limit": -1.0, "overQuotaWeight": 1.0}
    if text is None:
        return values
    parts = text.split(":")
    if len(parts) > 3:
        raise typer.BadParameter(f"{text!r}: expected {RESOURCE_HELP}", param_hint=option)
    for field, part in zip(("quota", "limit", "overQuotaWeight"), parts, strict=False):
        try:
            values[field] = float(part)
        except ValueError:
            raise typer.BadParameter(
                f"{text!r}: {field} {part!r} is not a number", param_hint=option
            ) from None
    return values


@queue_app.command("create")
def queue_create(
    name: Annotated[str, typer.Argument(help="queue name")],
    parent: Annotated[str | None, typer.Option(help="parent queue")] = None,
    priority: Annotated[int | None, typer.Option(help="priority (default 100)")] = None,
    gpu: Annotated[str | None, typer.Option(help=f"GPUs: {RESOURCE_HELP}")] = None,
    cpu: Annotated[str | None, typer.Option(help=f"millicores: {RESOURCE_HELP}")] = None,
    memory: Annotated[str | None, typer.Option(help=f"MB: {RESOURCE_HELP}")] = None,
    kubeconfig: Annotated[str | None, typer.Option(help=KUBECONFIG_HELP)] = None,
) -> None:
    """Create (or update) a Queue: ``gpushare queue create nlp --parent ml-org --gpu 0.33:1``."""
    from gpushare.kube.client import QUEUES, ApiError, KubeClient

    spec: dict = {"resources": {"gpu": parse_share("--gpu", gpu),
                                "cpu": parse_share("--cpu", cpu),
                                "memory": parse_share("--memory", memory)}}
    if parent:
        spec["parentQueue"] = parent
    if priority is not None:
        spec["priority"] = priority
    body = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
            "spec": spec}
    client = KubeClient.from_kubeconfig(kubeconfig_path(kubeconfig), pool_size=1)
    try:
        try:
            client.create(QUEUES.collection(), body)
            verb = "created"
        except ApiError as error:
            if error.status != 409:
                raise
            client.merge_patch(QUEUES.item(name), {"spec": spec})
            verb = "updated"
    except ApiError as error:
        typer.echo(f"error: queue {name}: {error}", err=True)
        raise typer.Exit(1) from None
    finally:
        client.close()
    typer.echo(f"queue/{name} {verb}")


@queue_app.command("list")
def queue_list(
    kubeconfig: Annotated[str | None, typer.Option(help=KUBECONFIG_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable: the rows of "
                                          "`gpushare status --json`'s queues")] = False,
) -> None:
    """Each queue's GPU quota, limit, fair share, allocated and requested, as a tree."""
    from gpushare.kube.client import QUEUES, KubeClient

    client = KubeClient.from_kubeconfig(kubeconfig_path(kubeconfig), pool_size=1)
    try:
        queues = client.list(QUEUES.collection()).get("items") or []
    finally:
        client.close()
    if as_json:
        import json

        from gpushare.cli.status import status_report

        typer.echo(json.dumps(status_report(queues, [], [], [])["queues"], indent=2))
        return
    typer.echo(format_queue_table(queues))


def format_queue_table(queues: list[dict]) -> str:
    """Rows in tree order (children indented under their parent), GPU columns."""
    by_parent: dict[str | None, list[dict]] = {}
    names = {Meta.of(q).name for q in queues}
    for queue in queues:
        parent = (queue.get("spec") or {}).get("parentQueue")
        by_parent.setdefault(parent if parent in names else None, []).append(queue)
    header = ("QUEUE", "PRIORITY", "GPU QUOTA", "LIMIT", "FAIR SHARE", "ALLOCATED", "REQUESTED")
    rows: list[tuple[str, ...]] = [header]

    def walk(parent: str | None, depth: int) -> None:
        for queue in sorted(by_parent.get(parent, []), key=lambda q: Meta.of(q).name):
            spec, status = queue.get("spec") or {}, queue.get("status") or {}
            gpu = (spec.get("resources") or {}).get("gpu") or {}
            name = Meta.of(queue).name
            rows.append((
                "  " * depth + name,
                str(spec.get("priority", 100)),
                _amount(gpu.get("quota")),
                _amount(gpu.get("limit")),
                (status.get("fairShare") or {}).get(GPU_RESOURCE, "-"),
                (status.get("allocated") or {}).get(GPU_RESOURCE, "-"),
                (status.get("requested") or {}).get(GPU_RESOURCE, "-"),
            ))
            walk(name, depth + 1)

    walk(None, 0)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
                     .rstrip() for row in rows)


def _amount(value: object) -> str:
    if value is None:
        return "-"
    if value == -1:
        return "unlimited"
    return f"{float(value):g}"  # type: ignore[arg-type]


def _component_kubeconfigs(server: ApiServer, data_dir: Path,
                           node: str | None) -> dict[str, Path]:
    """A kubeconfig (0600) per component identity (apiserver/auth/components.py), its token
    issued on the first start and kept after; the agent's is its node's own identity
    (``system:node:<node>``), so that it may act only for that node."""
    from gpushare.apiserver.auth import components

    out: dict[str, Path] = {}
    identities = dict(components.COMPONENTS)
    if node is not None:
        identities["agent"] = components.node_identity(node)
    for name, identity in identities.items():
        token = components.component_token(server.tokens, identity)
        out[name] = server.write_kubeconfig(data_dir / f"{name}.kubeconfig", token=token,
                                            user=identity.name)
    return out


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _child(args: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    from gpushare.cli.lifeline import die_with_parent

    log_file = log_path.open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", "gpushare.cli.main", *args],
        stdout=log_file, stderr=subprocess.STDOUT,
        start_new_session=True,  # Ctrl-C reaches us only; we stop the children in order
        # killed outright, we take them with us: SIGTERM to each (cli/lifeline.py)
        preexec_fn=die_with_parent(),
    )


AGENT_STOP_S = 50.0  # the agent's shutdown grace cap (30 s) plus its reaping


def _stop_child(proc: subprocess.Popen[bytes], name: str, timeout: float = 10.0) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        log.warning("%s did not stop in %.0fs; killing it", name, timeout)
        proc.kill()
        proc.wait(5)


def up(
    data_dir: Annotated[Path, typer.Option(help="state directory")] = Path(".gpushare"),
    port: Annotated[int, typer.Option(help="API port on 127.0.0.1 (0: any free port)")] = 6443,
    no_agent: Annotated[bool, typer.Option("--no-agent", help="do not start a node agent")] = False,
    gpus: Annotated[
        str | None, typer.Option(help="declare fake GPUs for the agent (1xL40S)")
    ] = None,
    pod_cidr: Annotated[
        str, typer.Option(help="the agent's pod addresses (auto: 10.244.<n>.0/24)")
    ] = "auto",
    node_name: Annotated[str | None, typer.Option(help="the agent's node name")] = None,
    scheduler_config: Annotated[
        Path | None, typer.Option(help="passed to `gpushare controllers --scheduler-config`")
    ] = None,
    anonymous_metrics: Annotated[bool, typer.Option(
        "--anonymous-metrics", help="serve /metrics without a token (default: a token "
        "allowed `get` on /metrics, e.g. bound to the system:monitoring ClusterRole)")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Run the control plane, the controllers and a node agent; Ctrl-C stops them all."""
    _setup_logging(verbose)
    controller_args = _checked_options(gpus, scheduler_config)
    data_dir.mkdir(parents=True, exist_ok=True)
    stop = _stop_on_signals()
    server = _start_api_server(data_dir, port, anonymous_metrics)
    kubeconfig = data_dir / "admin.kubeconfig"
    server.write_kubeconfig(str(kubeconfig))
    _ensure_default_queue(str(kubeconfig))
    agent_node = None if no_agent else node_name or socket.gethostname()
    identities = _component_kubeconfigs(server, data_dir, agent_node)
    logs = data_dir / "logs"
    logs.mkdir(exist_ok=True)
    commands: dict[str, list[str]] = {
        # The controllers (the scheduler among them) run as system:gpushare-controllers,
        # with only the roles of controllers/rbac.yaml; never with the admin's token.
        "controllers": ["controllers", "--kubeconfig", str(identities["controllers"]),
                        "--tenant-kubeconfig", str(identities["tenancy"]), *controller_args],
    }
    if agent_node is not None:
        agent_gpus = _gpus_for_agent(gpus)
        # The agent runs as its node (system:node:<node>, group system:nodes, with the role
        # of agent/rbac.yaml), not as the admin.
        commands["agent"] = [
            "agent", "--kubeconfig", str(identities["agent"]),
            "--node-name", agent_node,
            "--data-dir", str(data_dir / "agent"),
            *(["--gpus", agent_gpus] if agent_gpus else []),
            "--pod-cidr", pod_cidr,
        ]
    children: dict[str, subprocess.Popen[bytes]] = {}
    exit_code = 0
    try:
        for name, args in commands.items():
            children[name] = _child(args, logs / f"{name}.log")
        failed = _wait_until_up(kubeconfig, agent_node, children, stop)
        if failed is not None:
            _report_failure(failed, children[failed], logs / f"{failed}.log",
                            "exited while starting")
            exit_code = 1
        else:
            typer.echo(
                f"gpushare is up: API {server.url}\n"
                f"  export KUBECONFIG={kubeconfig.resolve()}\n"
                f"  kubectl get nodes,queues\n"
                f"dashboard {server.url}/dashboard (log in with the kubeconfig's token)\n"
                f"metrics {server.url}/metrics\n"
                f"logs under {logs.resolve()}; Ctrl-C stops everything."
            )
            exit_code = _keep_running(children, commands, logs, stop)
    finally:
        typer.echo("stopping ...")
        for name, proc in reversed(list(children.items())):
            # the agent gives each pod its own grace period (at most 30 s) and its hooks
            _stop_child(proc, name, AGENT_STOP_S if name == "agent" else 10.0)
        with contextlib.suppress(Exception):
            server.stop()
        typer.echo("stopped.")
    if exit_code:
        raise typer.Exit(exit_code)


def _checked_options(gpus: str | None, scheduler_config: Path | None) -> list[str]:
    """Refuse bad options before anything starts; the controllers' extra arguments."""
    from gpushare.model.gpu_products import GpuSpecError, parse_gpu_spec

    if gpus:
        try:
            parse_gpu_spec(gpus)
        except GpuSpecError as error:
            typer.echo(f"error: {error}", err=True)
            raise typer.Exit(2) from None
    if scheduler_config is None:
        return []
    from gpushare.controllers.scheduling.scheduler_config import (
        SchedulerConfigError,
        load_scheduler_config,
    )

    try:
        load_scheduler_config(scheduler_config)
    except SchedulerConfigError as error:
        typer.echo(f"error: --scheduler-config {error}", err=True)
        raise typer.Exit(2) from None
    return ["--scheduler-config", str(scheduler_config.resolve())]


def _start_api_server(data_dir: Path, port: int, anonymous_metrics: bool) -> ApiServer:
    """The embedded API server, started on 127.0.0.1:`port` (0: any free port)."""
    try:
        from gpushare.cli.compose import api_server
    except ImportError as error:
        typer.echo(f"error: the API server is not available: {error}", err=True)
        raise typer.Exit(1) from None
    try:
        server = api_server(str(data_dir), "127.0.0.1", port or _free_port(),
                            anonymous_metrics=anonymous_metrics)
    except OSError as error:
        typer.echo(f"error: --port {port}: {error.strerror or error}; choose another port"
                   " (0: any free one)", err=True)
        raise typer.Exit(1) from None
    except RuntimeError as error:  # another server holds the data directory
        typer.echo(f"error: --data-dir {data_dir}: {error}", err=True)
        raise typer.Exit(1) from None
    server.start()
    return server


def _keep_running(children: dict[str, subprocess.Popen[bytes]],
                  commands: dict[str, list[str]], logs: Path, stop: threading.Event) -> int:
    """Restart a child that exits, until Ctrl-C/SIGTERM (0) or one exits too often (1)."""
    restarts: dict[str, list[float]] = {name: [] for name in commands}
    while not stop.wait(1.0):
        for name, proc in list(children.items()):
            if proc.poll() is None:
                continue
            now = time.monotonic()
            recent = [t for t in restarts[name] if now - t < RESTART_WINDOW_SECONDS]
            if len(recent) >= MAX_RESTARTS:
                _report_failure(name, proc, logs / f"{name}.log",
                                f"exited {len(recent) + 1} times within"
                                f" {RESTART_WINDOW_SECONDS:.0f}s; stopping everything")
                stop.set()
                return 1
            log.warning("%s exited with %s; restarting it (see %s)", name,
                        proc.returncode, logs / f"{name}.log")
            restarts[name] = [*recent, now]
            children[name] = _child(commands[name], logs / f"{name}.log")
    return 0


def register(app: typer.Typer) -> None:
    """Add this module's commands to the top-level app."""
    app.command("up")(up)
    app.command("controllers")(controllers)
    app.add_typer(node_app, name="node")
    app.add_typer(queue_app, name="queue")
