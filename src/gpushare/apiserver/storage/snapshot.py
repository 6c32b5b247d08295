"""The store's file: refusing to start on a lost one, snapshots, and restoring them.

`state.db` is the cluster. A data directory that shows a cluster existed (its tokens, its
admin kubeconfig, its ServiceAccount signing key) but whose `state.db` is missing, empty
or not a SQLite database any more (truncated, overwritten) is not a new cluster: starting
there would silently hand out an empty one under the old credentials. The server refuses
(`check_store_file`) and says how to restore.

A snapshot (`gpushare backup`, as `etcdctl snapshot save`) is a consistent copy of the
store taken with SQLite's online backup API while the server serves: a reader of the WAL
database sees one committed state, whatever is written meanwhile. `gpushare restore` (as
`etcdctl snapshot restore`) checks a snapshot and puts it in place of `state.db` of a data
directory no server is using. Secrets in a snapshot are encrypted with the data
directory's `encryption-config.yaml` key: keep that file (and `pki/`, `tokens.yaml`) with
the snapshots, apart from them.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

DB_NAME = "state.db"
LOCK_NAME = "apiserver.lock"
SQLITE_HEADER = b"SQLite format 3\x00"
# Written only after the store was first opened: their presence means a cluster existed.
_CLUSTER_MARKERS = ("tokens.yaml", "admin.kubeconfig", "pki/sa.key")
_TABLES = {"objects", "meta"}


class StoreFileError(RuntimeError):
    """The store's file cannot be used as it is; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    path: Path
    size: int
    objects: int
    revision: int


def _restore_hint(data_dir: Path) -> str:
    return (f"restore the last snapshot with `gpushare restore SNAPSHOT --data-dir "
            f"{data_dir}`, or move {data_dir} away to start a new cluster")


def check_store_file(data_dir: Path) -> None:
    """Refuse a store file that was lost or damaged in a data directory that held a
    cluster: missing or zero-length, or without SQLite's header."""
    db = data_dir / DB_NAME
    existed = [m for m in _CLUSTER_MARKERS if (data_dir / m).exists()]
    size = db.stat().st_size if db.exists() else 0
    if size == 0:
        if existed:
            state = "is missing" if not db.exists() else "is empty (0 bytes)"
            raise StoreFileError(
                f"{db} {state}, but {data_dir} held a cluster ({', '.join(existed)}): "
                f"refusing to start a new, empty one under its credentials; "
                f"{_restore_hint(data_dir)}")
        return
    with db.open("rb") as f:
        header = f.read(len(SQLITE_HEADER))
    if header != SQLITE_HEADER:
        raise StoreFileError(f"{db} is not a SQLite database ({size} bytes, truncated or "
                             f"overwritten); {_restore_hint(data_dir)}")


def _inspect(path: Path) -> SnapshotInfo:
    """Check a store file (integrity, the store's tables); what it holds."""
    if not path.is_file() or path.stat().st_size == 0:
        raise StoreFileError(f"{path}: no snapshot there (missing or empty)")
    with path.open("rb") as f:
        if f.read(len(SQLITE_HEADER)) != SQLITE_HEADER:
            raise StoreFileError(f"{path} is not a SQLite database")
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        check = db.execute("PRAGMA integrity_check").fetchone()
        if not check or check[0] != "ok":
            raise StoreFileError(f"{path} is damaged: integrity check says {check!r}")
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not tables >= _TABLES:
            raise StoreFileError(f"{path} is not a gpushare store (tables {sorted(tables)})")
        objects = int(db.execute("SELECT COUNT(*) FROM objects").fetchone()[0])
        revision = int(db.execute("SELECT COALESCE(MAX(rv), 0) FROM objects").fetchone()[0])
    except sqlite3.DatabaseError as e:
        raise StoreFileError(f"{path} cannot be read as a store: {e}") from None
    finally:
        db.close()
    return SnapshotInfo(path, path.stat().st_size, objects, revision)


def _copy(source: Path, target: Path) -> None:
    """`source` into a fresh `target` (0600) through SQLite's online backup API."""
    tmp = target.with_name(target.name + ".part")
    tmp.unlink(missing_ok=True)
    os.close(os.open(tmp, os.O_CREAT | os.O_WRONLY, 0o600))
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    dst = sqlite3.connect(tmp)
    try:
        src.backup(dst)
        dst.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
    finally:
        dst.close()
        src.close()
    with tmp.open("rb") as f:
        os.fsync(f.fileno())
    tmp.replace(target)


def save(data_dir: Path, out: Path) -> SnapshotInfo:
    """A consistent snapshot of `data_dir`'s store in `out`, server running or not."""
    db = data_dir / DB_NAME
    check_store_file(data_dir)
    if not db.exists() or db.stat().st_size == 0:
        raise StoreFileError(f"{db}: no store to back up")
    out.parent.mkdir(parents=True, exist_ok=True)
    _copy(db, out)
    return _inspect(out)


def restore(snapshot: Path, data_dir: Path) -> SnapshotInfo:
    """Put `snapshot` in place of `data_dir`'s store; refused while a server uses it."""
    info = _inspect(snapshot)
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    with (data_dir / LOCK_NAME).open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise StoreFileError(f"an API server is using {data_dir}: stop it first") from None
        db = data_dir / DB_NAME
        _copy(snapshot, db)
        for suffix in ("-wal", "-shm"):
            (data_dir / f"{DB_NAME}{suffix}").unlink(missing_ok=True)
    return info
