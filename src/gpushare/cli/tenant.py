"""``gpushare tenant ...``: virtual clusters, one per team.

``create`` writes a VirtualCluster through the API (``kubectl apply`` of the same object
does the same), waits for the tenancy controller to provision it and writes the tenant
admin's kubeconfig; ``kubeconfig`` prints it again (or one for a plain user of the tenant);
``list``, ``pause``, ``resume``, ``delete`` do what they say. Tokens are issued in the API
server's ``tokens.yaml`` (hence ``--data-dir``), valid in the tenant's cluster only. On a
Kubernetes cluster, whose tenants have an API server of their own (``tenancy/plane.py``),
there is no such file at hand: the kubeconfig is the one the tenancy controller keeps in the
host Secret ``vc-<team>/vc-kubeconfig``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from gpushare.api.objects import Meta
from gpushare.cli import helpformat
from gpushare.cli.kubeconfig import HELP_WITH_DATA_DIR, kubeconfig_path

tenant_app = typer.Typer(rich_markup_mode=helpformat.MARKUP,
                         help="Virtual clusters: each team its own Kubernetes cluster on "
                              "the shared GPUs.", no_args_is_help=True)

DataDir = Annotated[Path, typer.Option(help="the API server's data directory (tokens.yaml, "
                                            "admin.kubeconfig)")]
KubeconfigOpt = Annotated[Path | None, typer.Option(help=HELP_WITH_DATA_DIR)]


def register(app: typer.Typer) -> None:
    app.add_typer(tenant_app, name="tenant")


def _client(data_dir: Path, kubeconfig: Path | None) -> Any:
    from gpushare.kube.client import KubeClient

    return KubeClient.from_kubeconfig(kubeconfig_path(kubeconfig, data_dir))


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(1)


def _split(values: list[str] | None) -> list[str]:
    return [v.strip() for value in values or () for v in value.split(",") if v.strip()]


@tenant_app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="the virtual cluster's name (a DNS label)")],
    queue: Annotated[list[str], typer.Option(help="queue(s) its pods may use, the first the "
                                                  "default (repeatable or a,b)")],
    priority_classes: Annotated[str | None, typer.Option(
        help="allowed priority classes, a,b (default: any of the host's)")] = None,
    max_pods: Annotated[int | None, typer.Option(help="live pods at most")] = None,
    pod_create_rate: Annotated[float | None, typer.Option(
        help="pods it may create per second (429 past it)")] = None,
    pod_create_burst: Annotated[int | None, typer.Option(
        help="pod creates allowed at once (default: the rate)")] = None,
    max_objects: Annotated[int | None, typer.Option(
        help="objects its cluster may hold (API quota; default 10000)")] = None,
    max_storage_bytes: Annotated[str | None, typer.Option(
        help="bytes its objects may take, e.g. 512Mi (API quota; default 256Mi)")] = None,
    data_dir: DataDir = Path(".gpushare"),
    kubeconfig: KubeconfigOpt = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="where to write the "
                                                "tenant admin's kubeconfig (default: "
                                                "DATA_DIR/tenants/NAME.kubeconfig)")] = None,
    timeout: Annotated[float, typer.Option(help="seconds to wait for it to be ready")] = 60.0,
) -> None:
    """Create a virtual cluster and write its admin's kubeconfig."""
    from gpushare.kube.client import ApiError
    from gpushare.tenancy.controller import VIRTUALCLUSTERS
    from gpushare.tenancy.names import API_VERSION, KIND

    spec: dict[str, Any] = {"queues": _split(queue)}
    if priority_classes:
        spec["priorityClasses"] = _split([priority_classes])
    if max_pods is not None:
        spec["maxPods"] = max_pods
    if pod_create_rate is not None:
        spec["podCreateRate"] = pod_create_rate
    if pod_create_burst is not None:
        spec["podCreateBurst"] = pod_create_burst
    if max_objects is not None:
        spec["maxObjects"] = max_objects
    if max_storage_bytes is not None:
        spec["maxStorageBytes"] = (int(max_storage_bytes) if max_storage_bytes.isdigit()
                                   else max_storage_bytes)
    client = _client(data_dir, kubeconfig)
    try:
        try:
            client.create(VIRTUALCLUSTERS.collection(), {
                "apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name},
                "spec": spec})
        except ApiError as error:
            raise _fail(str(error.body.get("message") or error)) from None
        vc = _wait_phase(client, name, ("Ready", "Pending", "Failed"), timeout)
        phase = (vc.get("status") or {}).get("phase")
        path = _write_kubeconfig(data_dir, kubeconfig, vc, None, output)
        message = (vc.get("status") or {}).get("message")
        typer.echo(f"virtualcluster {name} {phase}" + (f" ({message})" if message else ""))
        typer.echo(f"KUBECONFIG={path} kubectl get pods")
        if phase == "Failed":
            raise typer.Exit(1)
    finally:
        client.close()


@tenant_app.command("kubeconfig")
def kubeconfig_cmd(
    name: Annotated[str, typer.Argument(help="the virtual cluster")],
    user: Annotated[str | None, typer.Option(help="a plain user of the tenant (its rights are "
                                                  "what the tenant's RBAC grants) instead of "
                                                  "its admin")] = None,
    data_dir: DataDir = Path(".gpushare"),
    kubeconfig: KubeconfigOpt = None,
    output: Annotated[Path | None, typer.Option("--output", "-o")] = None,
    server: Annotated[str | None, typer.Option(
        help="the tenant plane's address as the tenant reaches it (an Ingress, a load "
             "balancer, a port-forward), instead of the one in the kubeconfig; "
             "/clusters/<name> is added")] = None,
) -> None:
    """Print (or write) a kubeconfig for a virtual cluster: its own endpoint and a token valid
    there only. With the API server's --data-dir (gpushare up) a token of its token file;
    on a Kubernetes cluster (no tokens.yaml there) the tenant admin's kubeconfig the tenancy
    controller keeps in the host Secret vc-<name>/vc-kubeconfig (--kubeconfig: the host's)."""
    from gpushare.tenancy.controller import VIRTUALCLUSTERS

    client = _client(data_dir, kubeconfig)
    try:
        vc = client.get(VIRTUALCLUSTERS.item(name))
    finally:
        client.close()
    if vc is None:
        raise _fail(f'virtualcluster "{name}" not found')
    if output is None:
        typer.echo(yaml.safe_dump(_kubeconfig(data_dir, kubeconfig, vc, user, server),
                                  sort_keys=False), nl=False)
    else:
        _write_kubeconfig(data_dir, kubeconfig, vc, user, output, server)


@tenant_app.command("list")
def list_cmd(
    data_dir: DataDir = Path(".gpushare"),
    kubeconfig: KubeconfigOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable")] = False,
) -> None:
    """The virtual clusters: queues, phase, pods, GPUs held, API quota and its use."""
    from gpushare.tenancy.controller import VIRTUALCLUSTERS
    from gpushare.tenancy.policy import TenantPolicy

    client = _client(data_dir, kubeconfig)
    try:
        items = client.list(VIRTUALCLUSTERS.collection()).get("items") or []
        used = _api_usage(client)
    finally:
        client.close()
    rows = []
    for vc in sorted(items, key=lambda v: Meta.of(v).name):
        spec, status = vc.get("spec") or {}, vc.get("status") or {}
        policy = TenantPolicy.from_object(vc)
        objects, held = used.get(policy.name, (None, None))
        rows.append({"name": Meta.of(vc).name, "queues": spec.get("queues") or [],
                     "priorityClasses": spec.get("priorityClasses"),
                     "maxPods": spec.get("maxPods"), "paused": bool(spec.get("paused")),
                     "phase": status.get("phase", ""), "pods": status.get("pods", 0),
                     "gpuAllocated": status.get("gpuAllocated", "0"),
                     "endpoint": status.get("endpoint", ""),
                     "message": status.get("message", ""),
                     "maxObjects": policy.max_objects, "objects": objects,
                     "maxStorageBytes": policy.max_storage_bytes, "storageBytes": held})
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    header = ("NAME", "QUEUES", "PHASE", "PODS", "GPU ALLOCATED", "OBJECTS", "STORAGE",
              "ENDPOINT")
    table = [header] + [(r["name"], ",".join(r["queues"]), r["phase"], str(r["pods"]),
                         r["gpuAllocated"], _of(r["objects"], r["maxObjects"], str),
                         _of(r["storageBytes"], r["maxStorageBytes"], _mib), r["endpoint"])
                        for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        typer.echo("   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def _api_usage(client: Any) -> dict[str, tuple[int, int]]:
    """(objects, bytes) each tenant's cluster holds, from the API server's /metrics
    (`apiserver_tenant_objects`, `apiserver_tenant_bytes`); empty if it cannot be read."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        response = client._send("GET", "/metrics")
        if response.status != 200:
            return {}
        text = response.data.decode()
    except Exception:  # the list still shows the quotas
        return {}
    objects: dict[str, int] = {}
    held: dict[str, int] = {}
    for family in text_string_to_metric_families(text):
        target = {"apiserver_tenant_objects": objects,
                  "apiserver_tenant_bytes": held}.get(family.name)
        if target is not None:
            for sample in family.samples:
                target[sample.labels["cluster"]] = int(sample.value)
    return {c: (n, held.get(c, 0)) for c, n in objects.items()}


def _of(used: int | None, limit: int, show: Any) -> str:
    return f"{'?' if used is None else show(used)}/{show(limit)}"


def _mib(n: int) -> str:
    return f"{n / 1024**2:.1f}Mi"


def _set_paused(name: str, paused: bool, data_dir: Path, kubeconfig: Path | None,
                timeout: float) -> None:
    from gpushare.tenancy.controller import VIRTUALCLUSTERS

    client = _client(data_dir, kubeconfig)
    try:
        if client.get(VIRTUALCLUSTERS.item(name)) is None:
            raise _fail(f'virtualcluster "{name}" not found')
        client.merge_patch(VIRTUALCLUSTERS.item(name), {"spec": {"paused": paused}})
        _wait_phase(client, name, ("Paused",) if paused else ("Ready", "Pending"), timeout)
    finally:
        client.close()
    typer.echo(f"virtualcluster {name} {'paused' if paused else 'resumed'}")


@tenant_app.command("pause")
def pause(name: str, data_dir: DataDir = Path(".gpushare"), kubeconfig: KubeconfigOpt = None,
          timeout: float = 60.0) -> None:
    """Take a virtual cluster's pods off the host; they keep their specs in the tenant."""
    _set_paused(name, True, data_dir, kubeconfig, timeout)


@tenant_app.command("resume")
def resume(name: str, data_dir: DataDir = Path(".gpushare"), kubeconfig: KubeconfigOpt = None,
           timeout: float = 60.0) -> None:
    """Bring a paused virtual cluster's pods back to the host."""
    _set_paused(name, False, data_dir, kubeconfig, timeout)


@tenant_app.command("delete")
def delete(name: str, data_dir: DataDir = Path(".gpushare"), kubeconfig: KubeconfigOpt = None,
           timeout: float = 120.0,
           wait: Annotated[bool, typer.Option(help="wait until everything is gone")] = True
           ) -> None:
    """Delete a virtual cluster: its pods on the host, every object in it, its tokens."""
    from gpushare.tenancy.controller import VIRTUALCLUSTERS
    from gpushare.tenancy.tokens import remove_tenant_tokens

    client = _client(data_dir, kubeconfig)
    try:
        if client.delete(VIRTUALCLUSTERS.item(name)) is None:
            raise _fail(f'virtualcluster "{name}" not found')
        deadline = time.monotonic() + timeout
        while wait and client.get(VIRTUALCLUSTERS.item(name)) is not None:
            if time.monotonic() > deadline:
                raise _fail(f"virtualcluster {name} still being deleted after {timeout:.0f}s")
            time.sleep(0.3)
    finally:
        client.close()
    removed = remove_tenant_tokens(data_dir / "tokens.yaml", name)
    typer.echo(f"virtualcluster {name} deleted ({removed} token(s) revoked)")


# -- helpers ------------------------------------------------------------------------------


def _wait_phase(client: Any, name: str, phases: tuple[str, ...], timeout: float
                ) -> dict[str, Any]:
    from gpushare.tenancy.controller import VIRTUALCLUSTERS

    deadline = time.monotonic() + timeout
    vc: dict[str, Any] = {}
    while time.monotonic() < deadline:
        vc = client.get(VIRTUALCLUSTERS.item(name)) or {}
        if (vc.get("status") or {}).get("phase") in phases and Meta.of(vc).uid:
            return vc
        time.sleep(0.2)
    phase = (vc.get("status") or {}).get("phase") or "no status"
    raise _fail(f"virtualcluster {name} is {phase} after {timeout:.0f}s (is `gpushare "
                "controllers` running?)")


def _kubeconfig(data_dir: Path, kubeconfig: Path | None, vc: dict[str, Any],
                user: str | None, server: str | None = None) -> dict[str, Any]:
    from gpushare.api.kubeconfig import kubeconfig as make_kubeconfig
    from gpushare.tenancy.tokens import tenant_token

    name = Meta.of(vc).name
    tokens = data_dir / "tokens.yaml"
    # The controller keeps a Secret only with a tenant plane of its own: then it is the one
    # (a tokens.yaml at hand is another server's).
    kept = _kept_kubeconfig(data_dir, kubeconfig, name, user, server,
                            required=not tokens.exists())
    if kept is not None:
        return kept
    if server is None:
        admin = yaml.safe_load(Path(kubeconfig_path(kubeconfig, data_dir)).read_text())
        server = str(admin["clusters"][0]["cluster"]["server"])
    server = server.split("/clusters/", 1)[0].rstrip("/")
    user_name, token = tenant_token(tokens, name, Meta.of(vc).uid, user)
    ca_path = data_dir / "pki" / "ca.crt"
    ca = ca_path.read_bytes() if ca_path.exists() else None
    return make_kubeconfig(f"{server}/clusters/{name}", token, user_name, context=name,
                           ca_pem=ca)


def _kept_kubeconfig(data_dir: Path, kubeconfig: Path | None, name: str, user: str | None,
                     server: str | None, required: bool) -> dict[str, Any] | None:
    """The tenant admin's kubeconfig from the host Secret the tenancy controller keeps
    (None: there is none, and ``required`` is off)."""
    from gpushare.tenancy.plane import KUBECONFIG_SECRET, read_kubeconfig

    client = _client(data_dir, kubeconfig)
    try:
        config = read_kubeconfig(client, name)
    finally:
        client.close()
    if config is None and not required:
        return None
    if user is not None:
        raise _fail("--user: the tenants have an API server of their own, whose token file "
                    "is not at hand: users of the tenant are made inside it "
                    "(ServiceAccounts, RBAC) with the admin's kubeconfig")
    if config is None:
        raise _fail(f"no tenant kubeconfig for {name}: {data_dir / 'tokens.yaml'} does not "
                    f"exist and the host has no Secret vc-{name}/{KUBECONFIG_SECRET} (is the "
                    "tenancy controller running with a tenant plane of its own?)")
    if server is not None:
        config["clusters"][0]["cluster"]["server"] = \
            f"{server.split('/clusters/', 1)[0].rstrip('/')}/clusters/{name}"
    return config


def _write_kubeconfig(data_dir: Path, kubeconfig: Path | None, vc: dict[str, Any],
                      user: str | None, output: Path | None, server: str | None = None) -> Path:
    path = output or data_dir / "tenants" / f"{Meta.of(vc).name}.kubeconfig"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(yaml.safe_dump(_kubeconfig(data_dir, kubeconfig, vc, user, server),
                                  sort_keys=False))
    tmp.chmod(0o600)
    tmp.replace(path)
    return path
