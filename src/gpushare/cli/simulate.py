"""``gpushare simulate``: run scheduling scenarios and compare them with their expectations."""

from __future__ import annotations

from pathlib import Path

import orjson
import typer

from gpushare.cli import simulate_trace
from gpushare.model.schema import ScenarioError
from gpushare.simulator.runner import ScenarioResult, run
from gpushare.simulator.scenario import load_file

simulate_app = typer.Typer(
    name="simulate",
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
) -> None:
    """Run each scenario, compare with its `expect`; exit 1 on any mismatch or bad file."""
    failed = 0
    for path in _files(files):
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


def register(app: typer.Typer) -> None:
    """Add this module's commands to the top-level app."""
    app.add_typer(simulate_app, name="simulate")
