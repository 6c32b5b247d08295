"""``gpushare simulate trace``: replay a cluster trace (openb CSV or gpushare JSON lines)
through the scheduler core, one or several placement policies side by side."""

from __future__ import annotations

from pathlib import Path

import orjson
import typer

from gpushare.simulator.fill import POLICIES, RECOMMENDED, FillResult, run_fill
from gpushare.simulator.plots import PlotError, check_path, line_plot
from gpushare.simulator.timeline import QUEUE_BY, run_timeline
from gpushare.simulator.traces import TraceError, read_nodes, read_pods

_POLICY_HELP = f"Placement policy, repeatable ({', '.join(POLICIES)})."


def trace(
    nodes: Path = typer.Option(..., "--nodes", help="Node list: openb CSV or .jsonl."),  # noqa: B008
    pods: Path = typer.Option(..., "--pods", help="Pod list: openb CSV or .jsonl."),  # noqa: B008
    mode: str = typer.Option("fill", "--mode", help="fill (FGD protocol) or timeline."),
    policy: list[str] = typer.Option([], "--policy", help=_POLICY_HELP),  # noqa: B008
    seed: list[int] = typer.Option([], "--seed", help="Shuffle seed, repeatable (default 42)."),  # noqa: B008
    demand: float = typer.Option(1.3, "--demand", help="fill: GPU demand / GPU capacity."),
    queue_by: str = typer.Option("qos", "--queue-by", help="timeline: queue per qos, or none."),
    json: bool = typer.Option(False, "--json", help="Print JSON lines."),
    plot: Path | None = typer.Option(None, "--plot", help="Write a plot (.png or .svg)."),  # noqa: B008
) -> None:
    """Replay a trace; report GPU allocation and fragmentation per policy."""
    policies = policy or [RECOMMENDED]
    for p in policies:
        if p not in POLICIES:
            _fail(f"--policy: expected one of {', '.join(POLICIES)}, got {p!r}")
    if mode not in ("fill", "timeline"):
        _fail(f"--mode: expected fill or timeline, got {mode!r}")
    if not 0 < demand <= 10:
        _fail(f"--demand: expected a ratio in (0, 10], got {demand}")
    if queue_by not in QUEUE_BY:
        _fail(f"--queue-by: expected one of {', '.join(QUEUE_BY)}, got {queue_by!r}")
    if plot is not None:
        try:
            check_path(plot)  # the name, its directory and matplotlib, before the trace runs
        except PlotError as err:
            _fail(str(err))
    try:
        trace_nodes = read_nodes(nodes)
        trace_pods = read_pods(pods)
    except TraceError as err:
        _fail(str(err))
    if not any(n.gpus for n in trace_nodes):
        _fail(f"--nodes: {nodes} has no node with GPUs")
    if mode == "timeline":
        _timeline(trace_nodes, trace_pods, policies, queue_by, json, plot)
        return
    seeds = seed or [42]
    results: list[FillResult] = []
    for p in policies:
        for s in seeds:
            r = run_fill(trace_nodes, trace_pods, p, s, demand)
            results.append(r)
            if json:
                for step in r.steps[:: max(1, len(r.steps) // 200)]:
                    typer.echo(orjson.dumps({
                        "kind": "step", "policy": p, "seed": s, "pod": step.pod,
                        "node": step.node,
                        "arrived": round(100 * step.arrived / r.capacity, 4),
                        "allocated": round(100 * step.allocated / r.capacity, 4),
                        "fragmentation": round(100 * step.fragmentation / r.capacity, 4),
                    }).decode())
    if json:
        for r in results:
            typer.echo(orjson.dumps(r.summary()).decode())
    else:
        _table(results, demand)
    if plot is not None:
        top = round(demand * 100)
        series = {}
        for r in results:
            a = r.allocation(1, top)
            series[f"{r.policy} seed {r.seed}"] = [(float(k), v) for k, v in a.items()]
        _plot(plot, series, "GPU allocation against arrived demand", "arrived GPU demand (%)",
              "GPU allocated (%)", diagonal=True)


def _table(results: list[FillResult], demand: float) -> None:
    top = str(round(demand * 100))
    marks = [m for m in ("50", "90", "100", top) if float(m) <= float(top)]
    marks = list(dict.fromkeys(marks))
    head = "policy           seed  " + "  ".join(f"alloc@{m:>3}%" for m in marks)
    head += "  frag@90%  pods/s"
    typer.echo(f"GPUs: {results[0].gpus:g}   arriving demand: {top}% of capacity")
    typer.echo(head)
    for r in results:
        a = r.allocation(1, int(top))
        f = r.fragmentation(10, 130).get("90", 0.0)
        speed = len(r.steps) / r.seconds if r.seconds else 0.0
        typer.echo(f"{r.policy:<16} {r.seed:>4}  " + "  ".join(
            f"{a.get(m, 0.0):>10.2f}" for m in marks) + f"  {f:>8.2f}  {speed:>6.0f}")


def _timeline(nodes, pods, policies, queue_by, json: bool, plot: Path | None) -> None:
    series = {}
    for p in policies:
        r = run_timeline(nodes, pods, p, queue_by)
        if json:
            typer.echo(orjson.dumps(r.summary()).decode())
        else:
            typer.echo(f"policy {p}: {r.placed}/{r.total} pods placed, "
                       f"GPU allocation mean {r.mean_allocation:.2f}%, "
                       f"Jain index over queues {r.jain_index():.3f}")
            fair = r.fair_shares()
            for q, w in sorted(r.waits().items()):
                typer.echo(f"  queue {q:<12} pods {w['pods']:>6}  wait p50 {w['p50']:>10.0f}s  "
                           f"p95 {w['p95']:>10.0f}s  never placed {w['unplaced']}  "
                           f"evicted {w['evicted']}")
                if q in fair:
                    f = fair[q]
                    short = 100 * f["shortOfFairShare"]
                    typer.echo(f"  {'':<18} GPUs running {f['allocatedGpus']:.2f} / fair share "
                               f"{f['fairShare']:.2f} (ratio {f['ratio']:.2f}), deficit "
                               f"{f['deficitGpus']:.2f}, short of it {short:.0f}% of the time")
        series[p] = r.allocation_series()
    if plot is not None:
        _plot(plot, series, "GPU allocation over the trace", "time (s)", "GPU allocated (%)")


def _plot(path: Path, series, title: str, xlabel: str, ylabel: str, diagonal=False) -> None:
    try:
        line_plot(path, series, title=title, xlabel=xlabel, ylabel=ylabel, diagonal=diagonal)
    except (PlotError, OSError) as err:
        _fail(str(err))


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)
