"""Attack (or accident): the store's file is emptied or cut short. Starting on it would hand
out a brand-new, empty cluster under the old cluster's credentials: the server refuses,
and a snapshot taken while serving (`gpushare backup`) brings the cluster back
(`gpushare restore`)."""

from __future__ import annotations

import threading
from pathlib import Path

from apiserver_proc import cli, start, stop

CM = "/api/v1/namespaces/default/configmaps"


def _names(client) -> set[str]:  # type: ignore[no-untyped-def]
    return {c["metadata"]["name"] for c in client.get(CM).json()["items"]}


def test_an_emptied_or_cut_store_is_refused_not_started_afresh(tmp_path: Path) -> None:
    proc, client = start(tmp_path)
    assert client.post(CM, json={"metadata": {"name": "precious"}}).status_code == 201
    stop(proc, client)
    db = tmp_path / "state.db"
    for damage in (b"", b"SQLite format 3\x00"[:7]):
        db.write_bytes(damage)
        for extra in tmp_path.glob("state.db-*"):
            extra.unlink()
        done = cli("apiserver", "--data-dir", str(tmp_path), "--port", "0")
        assert done.returncode != 0, "the server started on a lost store"
        assert "state.db" in done.stderr and "gpushare restore" in done.stderr, done.stderr
        assert db.read_bytes() == damage  # nothing written over it


def test_backup_while_serving_and_restore(tmp_path: Path) -> None:
    data, snap = tmp_path / "data", tmp_path / "snap.db"
    proc, client = start(data)
    try:
        for i in range(20):
            assert client.post(CM, json={"metadata": {"name": f"before-{i}"}}).status_code == 201
        stop_writing = threading.Event()

        def keep_writing() -> None:  # writes go on while the snapshot is taken
            i = 0
            while not stop_writing.is_set():
                client.post(CM, json={"metadata": {"name": f"during-{i}"}})
                i += 1

        writer = threading.Thread(target=keep_writing)
        writer.start()
        try:
            done = cli("backup", str(snap), "--data-dir", str(data))
        finally:
            stop_writing.set()
            writer.join(30)
        assert done.returncode == 0, done.stderr
        assert "snapshot saved" in done.stdout
        refused = cli("restore", str(snap), "--data-dir", str(data))
        assert refused.returncode != 0 and "stop it first" in refused.stderr
        live = _names(client)
    finally:
        stop(proc, client)
    (data / "state.db").write_bytes(b"")
    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(snap.read_bytes()[:4096])
    bad = cli("restore", str(damaged), "--data-dir", str(data))
    assert bad.returncode != 0 and (data / "state.db").read_bytes() == b""
    done = cli("restore", str(snap), "--data-dir", str(data))
    assert done.returncode == 0, done.stderr
    proc, client = start(data)
    try:
        restored = _names(client)
        assert {f"before-{i}" for i in range(20)} <= restored
        assert restored <= live  # a state the server really had, nothing invented
        assert client.post(CM, json={"metadata": {"name": "after"}}).status_code == 201
    finally:
        stop(proc, client)
