"""The `gpushare` command. Each area adds its own commands from its own module."""

from __future__ import annotations

import typer

from gpushare.cli import (
    agent,
    backup,
    demo,
    helpformat,
    install,
    node_daemon,
    server,
    simulate,
    status,
    tenant,
    up,
    webhook,
)

app = typer.Typer(
    name="gpushare",
    rich_markup_mode=helpformat.MARKUP,
    help="Share a few GPUs between teams: fair-share queues, fractions, gangs, enforced shares.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)



@app.callback()
def main() -> None:
    """gpushare: fair-share GPU scheduling with enforced fractions and per-team clusters."""


@app.command()
def version(
    as_json: bool = typer.Option(False, "--json", help="machine-readable"),
) -> None:
    """Print gpushare's version."""
    from gpushare import __version__

    if as_json:
        import json

        typer.echo(json.dumps({"version": __version__}))
        return
    typer.echo(__version__)


for module in (demo, up, server, backup, agent, simulate, tenant, status, install,
               webhook, node_daemon):
    module.register(app)
helpformat.install()


if __name__ == "__main__":
    app()
