"""``gpushare status``: queues, GPUs and what waits, on one terminal screen (or ``--json``).

Everything is read through the API (queues, nodes, pods, events), so it shows what the
kubeconfig's user may see. `status_report` is pure: API objects in, one dict out.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from gpushare.api.contracts import (
    DEFAULT_QUEUE,
    MILLI,
    NODE_ENFORCEMENT_ANNOTATION,
    QUEUE_LABEL,
)
from gpushare.api.contracts import GPU_RESOURCE as GPU
from gpushare.api.contracts import SCHEDULER_NAMES as SCHEDULERS
from gpushare.api.gpu import bound_gpus
from gpushare.api.objects import Meta, Obj
from gpushare.api.quantity import parse_quantity
from gpushare.api.timefmt import rfc3339
from gpushare.cli.kubeconfig import HELP as KUBECONFIG_HELP
from gpushare.model.queue import root_quota_overcommit

FINISHED = ("Succeeded", "Failed")


def _gpus(text: Any) -> float | None:
    if text is None:
        return None
    try:
        return float(parse_quantity(str(text)))
    except (ValueError, ArithmeticError):
        return None


def _queues(queues: list[Obj]) -> list[Obj]:
    names = {Meta.of(q).name for q in queues}
    children: dict[str, list[Obj]] = {}
    for q in queues:
        parent = (q.get("spec") or {}).get("parentQueue")
        children.setdefault(parent if isinstance(parent, str) and parent in names else "",
                            []).append(q)
    rows: list[Obj] = []

    def walk(parent: str, depth: int) -> None:
        for q in sorted(children.get(parent, []), key=lambda q: Meta.of(q).name):
            spec, status = q.get("spec") or {}, q.get("status") or {}
            gpu = (spec.get("resources") or {}).get("gpu") or {}
            name = Meta.of(q).name
            rows.append({
                "name": name, "depth": depth, "parent": spec.get("parentQueue") or None,
                "priority": spec.get("priority", 100),
                "gpuQuota": gpu.get("quota"), "gpuLimit": gpu.get("limit"),
                "gpuFairShare": _gpus((status.get("fairShare") or {}).get(GPU)),
                "gpuAllocated": _gpus((status.get("allocated") or {}).get(GPU)) or 0.0,
                "gpuRequested": _gpus((status.get("requested") or {}).get(GPU)),
            })
            walk(name, depth + 1)

    walk("", 0)
    return rows


def _slices(pods: list[Obj]) -> dict[tuple[str, str], list[Obj]]:
    out: dict[tuple[str, str], list[Obj]] = {}
    for pod in pods:
        meta, spec = Meta.of(pod), pod.get("spec") or {}
        node = spec.get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in FINISHED:
            continue
        indices, milli = bound_gpus(pod)
        milli = milli or MILLI  # no portion written (or none readable): whole GPUs
        for index in indices:
            out.setdefault((node, str(index)), []).append({
                "pod": f"{meta.namespace}/{meta.name}",
                "queue": meta.labels.get(QUEUE_LABEL, DEFAULT_QUEUE),
                "portion": milli / MILLI,
                "portion_milli": milli,
            })
    return out


def _gpu_rows(nodes: list[Obj], pods: list[Obj]) -> list[Obj]:
    slices = _slices(pods)
    rows = []
    for node in sorted(nodes, key=lambda n: Meta.of(n).name):
        meta = Meta.of(node)
        name, labels = meta.name, meta.labels
        try:
            count = int(((node.get("status") or {}).get("capacity") or {}).get(GPU, 0))
        except (TypeError, ValueError):
            count = 0
        for i in range(count):
            held = sorted(slices.get((name, str(i)), []), key=lambda s: s["pod"])
            rows.append({
                "node": name, "gpu": i, "product": labels.get("nvidia.com/gpu.product", ""),
                "enforcement": meta.annotations.get(NODE_ENFORCEMENT_ANNOTATION, ""),
                "slices": held,
                "free": max(0, MILLI - sum(s["portion_milli"] for s in held)) / MILLI,
            })
    return rows


def _pending(pods: list[Obj], events: list[Obj]) -> list[Obj]:
    reasons: dict[str, tuple[str, str]] = {}
    for e in events:
        obj = e.get("involvedObject") or {}
        if e.get("reason") != "Unschedulable" or obj.get("kind") != "Pod":
            continue
        key = f"{obj.get('namespace')}/{obj.get('name')}"
        when = str(e.get("lastTimestamp") or e.get("eventTime") or "")
        if key not in reasons or when >= reasons[key][0]:
            reasons[key] = (when, str(e.get("message", "")))
    rows = []
    for pod in pods:
        meta, spec = Meta.of(pod), pod.get("spec") or {}
        if spec.get("nodeName") or spec.get("schedulerName") not in SCHEDULERS:
            continue
        if (pod.get("status") or {}).get("phase") in FINISHED or meta.deleting:
            continue
        key = f"{meta.namespace}/{meta.name}"
        rows.append({
            "pod": key,
            "queue": meta.labels.get(QUEUE_LABEL, DEFAULT_QUEUE),
            "reason": reasons.get(key, ("", "not decided yet"))[1],
        })
    return sorted(rows, key=lambda r: (r["queue"], r["pod"]))


def _schedulable(node: Obj) -> bool:
    """Ready and not cordoned: a node the scheduler counts in the cluster's capacity."""
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _warnings(rows: list[Obj], nodes: list[Obj]) -> list[str]:
    """The scheduler's warning, from the same figures: ready, uncordoned nodes' GPUs."""
    capacity = sum(_gpus((n.get("status") or {}).get("capacity", {}).get(GPU)) or 0.0
                   for n in nodes if _schedulable(n))
    roots = {r["name"]: float(r["gpuQuota"]) for r in rows
             if r["depth"] == 0 and isinstance(r["gpuQuota"], int | float)}
    message = root_quota_overcommit(roots, capacity)
    return [message] if message else []


def _reservations(podgroups: list[Obj]) -> list[Obj]:
    """Nodes the scheduler holds for gangs that waited too long (read off the PodGroups)."""
    from gpushare.controllers.scheduling.reservations import reservation_of
    from gpushare.controllers.scheduling.translate import TranslateError

    rows = []
    for pg in podgroups:
        try:
            held = reservation_of(pg)
        except TranslateError:
            continue  # the scheduler reports an unreadable one on the PodGroup itself
        if held is not None:
            rows.append({"podgroup": held.job,
                         "queue": str((pg.get("spec") or {}).get("queue") or DEFAULT_QUEUE),
                         "nodes": list(held.nodes), "since": rfc3339(held.since)})
    return sorted(rows, key=lambda r: (r["queue"], r["podgroup"]))


def status_report(queues: list[Obj], nodes: list[Obj], pods: list[Obj],
                  events: list[Obj], podgroups: list[Obj] | None = None) -> dict[str, Any]:
    rows = _queues(queues)
    return {"queues": rows, "gpus": _gpu_rows(nodes, pods),
            "pending": _pending(pods, events), "warnings": _warnings(rows, nodes),
            "reservations": _reservations(podgroups or [])}


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 0:
        return "unlimited"
    milli = round(value * 1000)
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def render(report: dict[str, Any], console: Any = None) -> None:
    """The report as tables. Names (queues, nodes, pods) are never cut, however narrow the
    terminal: their columns keep their width and the others wrap, the bars are cropped."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = console or Console()
    names = ["  " * r["depth"] + r["name"] for r in report["queues"]]
    queues = Table(title="Queues (GPU)", title_justify="left", expand=False)
    queues.add_column("queue", no_wrap=True, min_width=max(map(len, names), default=5))
    for column in ("priority", "quota", "limit", "fair share", "allocated", "requested"):
        queues.add_column(column, justify="right", overflow="fold")
    queues.add_column("", overflow="crop", no_wrap=True)
    scale = max([1.0] + [max(r["gpuAllocated"], r["gpuRequested"] or 0, r["gpuQuota"] or 0)
                         for r in report["queues"]])
    for name, r in zip(names, report["queues"], strict=True):
        width = 20
        filled = round(width * r["gpuAllocated"] / scale)
        quota = round(width * max(r["gpuQuota"] or 0, 0) / scale)
        bar = Text("█" * filled + "░" * max(0, quota - filled), style="cyan")
        queues.add_row(name, str(r["priority"]),
                       _fmt(r["gpuQuota"]),
                       _fmt(r["gpuLimit"]), _fmt(r["gpuFairShare"]), _fmt(r["gpuAllocated"]),
                       _fmt(r["gpuRequested"]), bar)
    gpus = Table(title="GPUs", title_justify="left")
    gpus.add_column("node", no_wrap=True,
                    min_width=max((len(r["node"]) for r in report["gpus"]), default=4))
    for column in ("gpu", "product", "held by", "free", "enforcement"):
        gpus.add_column(column, overflow="fold")
    for r in report["gpus"]:
        held = ", ".join(f"{s['queue']} {_fmt(s['portion'])} ({s['pod']})"
                         for s in r["slices"]) or "-"
        gpus.add_row(r["node"], str(r["gpu"]), r["product"], held, _fmt(r["free"]),
                     r["enforcement"])
    pending = Table(title="Pending", title_justify="left")
    for column in ("pod", "queue", "scheduler's reason"):
        pending.add_column(column, overflow="fold")
    for r in report["pending"]:
        pending.add_row(r["pod"], r["queue"], r["reason"])
    console.print(queues)
    for warning in report.get("warnings", ()):
        console.print(Text(f"warning: {warning}", style="bold yellow"))
    console.print(gpus)
    if report["pending"]:
        console.print(pending)
    else:
        console.print("Pending: nothing is waiting.")
    if report.get("reservations"):
        reserved = Table(title="Reserved nodes (for gangs that waited too long)",
                         title_justify="left")
        for column in ("podgroup", "queue", "nodes", "since"):
            reserved.add_column(column, overflow="fold")
        for r in report["reservations"]:
            reserved.add_row(r["podgroup"], r["queue"], ", ".join(r["nodes"]), r["since"])
        console.print(reserved)


def status(
    kubeconfig: Annotated[str | None, typer.Option(help=KUBECONFIG_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable")] = False,
) -> None:
    """Queues, GPUs and what is pending, on one screen."""
    from gpushare.cli.kubeconfig import kubeconfig_path
    from gpushare.kube.client import (
        EVENTS,
        NODES,
        PODGROUPS,
        PODS,
        QUEUES,
        ApiError,
        KubeClient,
    )

    client = KubeClient.from_kubeconfig(kubeconfig_path(kubeconfig), pool_size=4)
    try:
        lists = {}
        for name, path in (("queues", QUEUES.collection()), ("nodes", NODES.collection()),
                           ("pods", PODS.collection()), ("events", EVENTS.collection())):
            try:
                lists[name] = client.list(path).get("items") or []
            except ApiError as error:
                typer.echo(f"error: listing {name}: {error}", err=True)
                raise typer.Exit(1) from None
        try:  # only for the reservations: a user who may not list PodGroups sees the rest
            lists["podgroups"] = client.list(PODGROUPS.collection()).get("items") or []
        except ApiError as error:
            typer.echo(f"note: reservations not shown: listing podgroups: {error}", err=True)
            lists["podgroups"] = []
    finally:
        client.close()
    report = status_report(lists["queues"], lists["nodes"], lists["pods"], lists["events"],
                           lists["podgroups"])
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    render(report)


def register(app: typer.Typer) -> None:
    app.command("status")(status)
