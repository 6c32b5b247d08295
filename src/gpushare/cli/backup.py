"""`gpushare backup` and `gpushare restore`: store snapshots (apiserver/storage/snapshot.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

DataDir = Annotated[Path, typer.Option("--data-dir", help="The API server's data directory.")]


def register(app: typer.Typer) -> None:
    """Add this module's commands to the top-level app."""
    app.command("backup")(backup)
    app.command("restore")(restore)


def backup(
    snapshot: Annotated[Path, typer.Argument(help="file to write the snapshot to")],
    data_dir: DataDir = Path(".gpushare"),
) -> None:
    """Save a consistent snapshot of the store, while the server runs (as `etcdctl snapshot
    save`). Keep encryption-config.yaml, pki/ and tokens.yaml too: Secrets in the snapshot
    are encrypted with that key."""
    from gpushare.apiserver.storage.snapshot import StoreFileError, save

    try:
        info = save(data_dir, snapshot)
    except (StoreFileError, OSError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"snapshot saved to {info.path}: {info.objects} objects, revision "
               f"{info.revision}, {info.size} bytes")


def restore(
    snapshot: Annotated[Path, typer.Argument(help="a snapshot written by `gpushare backup`")],
    data_dir: DataDir = Path(".gpushare"),
) -> None:
    """Replace the store of a stopped server's data directory with a snapshot (as `etcdctl
    snapshot restore`); the snapshot is checked first, and nothing is changed when it is
    damaged or a server is using the directory."""
    from gpushare.apiserver.storage.snapshot import StoreFileError
    from gpushare.apiserver.storage.snapshot import restore as restore_snapshot

    try:
        info = restore_snapshot(snapshot, data_dir)
    except (StoreFileError, OSError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"restored {info.objects} objects (revision {info.revision}) from {snapshot} "
               f"into {data_dir}; start the server on it")
