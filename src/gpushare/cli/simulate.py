"""``gpushare simulate``: run scheduling scenarios and compare them with their expectations."""

from __future__ import annotations

from pathlib import Path

import orjson
import typer

from gpushare.cli import helpformat, simulate_trace
from gpushare.model.schema import ScenarioError
from gpushare.simulator.runner import ScenarioResult, run
from gpushare.simulator.scenario import load_file

simulate_app = typer.Typer(
    name="simulate",
    rich_markup_mode=helpformat.MARKUP,
    help="Replay scheduling scenarios and cluster traces on gpushare's scheduler.",
    no_args_is_help=True,
)


def _files(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for path in paths:
        if path.is_dir():
            out.extend(sorted(path.rglob("*.yaml")))
        else:
            out.append(path)
    return out


@simulate_app.command("scenario")
def scenario(
    files: list[Path] = typer.Argument(..., help="Scenario files or folders of them."),  # noqa: B008
    json: bool = typer.Option(False, "--json", help="Print one result report per line."),
    plot: Path | None = typer.Option(  # noqa: B008
        None, "--plot", help="Draw GPU allocation per queue over the cycles, fair share as "
        "dashed lines, into this .png or .svg (several scenarios: FILE-<scenario>.png)."),
) -> None:
    """Run each scenario, compare with its `expect`; exit 1 on any mismatch or bad file."""
    from gpushare.simulator.plots import PlotError, check_path

    paths = _files(files)
    if plot is not None:
        try:
            check_path(plot)
        except PlotError as err:
            raise typer.BadParameter(str(err).removeprefix("--plot: "),
                                     param_hint="--plot") from None
    failed = 0
    for path in paths:
        try:
            result: ScenarioResult = run(load_file(path))
        except ScenarioError as err:
            failed += 1
            if json:
                typer.echo(orjson.dumps({"file": str(path), "error": str(err)}).decode())
            else:
                typer.echo(f"ERROR {path}: {err}", err=True)
            continue
        except OSError as err:
            failed += 1
            typer.echo(f"ERROR {path}: {err.strerror or err}", err=True)
            continue
        if not result.passed:
            failed += 1
        if plot is not None:
            target = plot if len(paths) == 1 else _plot_name(plot, result.name)
            _plot(result, target)
            if not json:
                typer.echo(f"plot  {target}")
        if json:
            typer.echo(orjson.dumps(result.report()).decode())
            continue
        if result.passed:
            typer.echo(f"ok    {result.name}  ({path})")
        else:
            typer.echo(f"FAIL  {result.name}  ({path})")
            for line in result.mismatches:
                typer.echo(f"      - {line}")
            for job, reason in sorted(result.reasons.items()):
                typer.echo(f"      pending {job}: {reason}")
    if failed:
        raise typer.Exit(1)


simulate_app.command("trace")(simulate_trace.trace)


def _plot_name(plot: Path, scenario: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in scenario).strip("-")
    return plot.with_name(f"{plot.stem}-{safe or 'scenario'}{plot.suffix}")


def _plot(result: ScenarioResult, target: Path) -> None:
    from gpushare.simulator.plots import allocation_plot, share_bars

    if not result.history:  # a fair-share division: no cycles, one figure per queue
        share_bars(target, {q: f["gpu"] for q, f in result.snapshot.queues.items()},
                   title=result.name)
        return
    names = sorted({q for cycle in result.history for q in cycle})
    allocated = {q: [cycle.get(q, (0.0, 0.0))[0] for cycle in result.history] for q in names}
    fair = {q: [cycle.get(q, (0.0, 0.0))[1] for cycle in result.history] for q in names}
    allocation_plot(target, allocated, fair, title=result.name, start=result.start)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the top-level app."""
    app.add_typer(simulate_app, name="simulate")
