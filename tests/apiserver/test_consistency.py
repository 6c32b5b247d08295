"""Commit before visible: failed commits are undone, bookmarks carry delivered versions,
too-large and exact resourceVersions are answered as Kubernetes does."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from apiserver_harness import http_client

from gpushare.apiserver.http.server import ApiServer
from gpushare.apiserver.storage import versions
from gpushare.apiserver.storage.store import Store
from gpushare.apiserver.storage.watch import Watcher, WatchHub, encode_event, stream
from gpushare.cli.compose import api_server

CM = "/api/v1/namespaces/default/configmaps"
ROOT_CA = "kube-root-ca.crt"  # made in every namespace


class FailingDb:
    """The store's SQLite connection, made to fail its commits while `failing` is set
    (what a full disk or an I/O error does to COMMIT)."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self.failing = False
        self.commits_refused = 0

    def execute(self, sql: str, *args: Any) -> Any:
        if self.failing and sql == "COMMIT":
            self.commits_refused += 1
            raise OSError("database or disk is full (simulated)")
        return self.db.execute(sql, *args)

    def close(self) -> None:
        self.db.close()


@pytest.fixture()
def failing(tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[ApiServer, FailingDb]]:
    monkeypatch.setattr(versions, "TOO_LARGE_WAIT", 0.3)
    server = api_server(tmp_path, "127.0.0.1", 0, bookmark_interval=0.2, event_log_size=200)
    db = FailingDb(server.store.db)
    server.store.db = db  # type: ignore[assignment]
    server.start()
    try:
        yield server, db
    finally:
        server.stop()


def _watch_lines(server: ApiServer, path: str, out: list[dict[str, Any]],
                 stop: threading.Event) -> threading.Thread:
    def run() -> None:
        with http_client(server) as c, c.stream("GET", path, timeout=30) as r:
            for line in r.iter_lines():
                if line:
                    out.append(orjson.loads(line))
                if stop.is_set():
                    return

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_a_failed_group_commit_is_undone_and_flips_readyz(
        failing: tuple[ApiServer, FailingDb]) -> None:
    server, db = failing
    c = http_client(server)
    assert c.post(CM, json={"metadata": {"name": "kept"}, "data": {"v": "1"}}).status_code == 201
    kept_rv = c.get(f"{CM}/kept").json()["metadata"]["resourceVersion"]
    before = {o["metadata"]["name"] for o in c.get(CM).json()["items"]}
    events: list[dict[str, Any]] = []
    stop = threading.Event()
    _watch_lines(server, f"{CM}?watch=true&resourceVersion={kept_rv}&allowWatchBookmarks=true",
                 events, stop)
    end = time.monotonic() + 10
    while not events:  # the watch is established once its first bookmark arrives
        assert time.monotonic() < end
        time.sleep(0.02)

    db.failing = True
    # Several writes at once: they share group commits, every one of them must fail.
    codes: list[int] = []

    def write(i: int) -> None:
        with http_client(server) as wc:
            codes.append(wc.post(CM, json={"metadata": {"name": f"phantom-{i}"}}).status_code)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert codes == [503] * 6
    r = c.put(f"{CM}/kept", json={"metadata": {"name": "kept"}, "data": {"v": "2"}})
    assert r.status_code == 503, r.text
    assert r.json()["reason"] == "ServiceUnavailable"
    assert c.delete(f"{CM}/kept").status_code == 503
    assert c.get("/readyz").status_code == 503
    assert c.get("/healthz").status_code == 503
    assert c.get("/livez").status_code == 200
    db.failing = False

    # Nothing of it is visible: not by GET, list, nor watch; a retry is not a conflict.
    for i in range(6):
        assert c.get(f"{CM}/phantom-{i}").status_code == 404
    names = {o["metadata"]["name"] for o in c.get(CM).json()["items"]}
    assert names == before
    assert c.get(f"{CM}/kept").json()["data"] == {"v": "1"}
    assert c.get("/readyz").status_code == 200
    assert c.post(CM, json={"metadata": {"name": "phantom-0"}}).status_code == 201
    end = time.monotonic() + 10
    while not any(e["object"]["metadata"].get("name") == "phantom-0" for e in events):
        assert time.monotonic() < end, events
        time.sleep(0.02)
    stop.set()
    seen = [(e["type"], e["object"]["metadata"].get("name")) for e in events
            if e["type"] != "BOOKMARK"]
    assert seen == [("ADDED", "phantom-0")], seen
    c.close()


def test_bookmarks_carry_only_delivered_versions() -> None:
    store = Store(None)
    hub = WatchHub(store)
    watcher = Watcher("root", "configmaps", None, (), (), min_rv=store.rv)
    hub.add(watcher)
    idle = asyncio.new_event_loop()  # commits are scheduled here and run only on demand
    store.attach(idle)

    def bookmark(rv: int, _end: bool) -> dict[str, Any]:
        return {"kind": "ConfigMap", "metadata": {"resourceVersion": str(rv)}}

    def encode(typ: str, obj: dict[str, Any], data: bytes | None) -> bytes:
        return encode_event(typ, obj, data)

    async def main() -> list[dict[str, Any]]:
        gen = stream(hub, watcher, [], encode, 30.0, True, bookmark, False, 0.01)
        got = [orjson.loads(await anext(gen))]
        store.put("root", "configmaps", {"metadata": {"name": "a", "namespace": "default"}})
        got.append(orjson.loads(await anext(gen)))  # a bookmark while "a" is uncommitted
        store.flush()
        got.append(orjson.loads(await anext(gen)))
        got.append(orjson.loads(await anext(gen)))
        await gen.aclose()
        return got

    start = store.rv
    got = asyncio.run(main())
    idle.close()
    assert [g["type"] for g in got] == ["BOOKMARK", "BOOKMARK", "ADDED", "BOOKMARK"]
    rvs = [int(g["object"]["metadata"]["resourceVersion"]) for g in got]
    assert rvs == [start, start, start + 1, start + 1]


def test_watch_from_a_future_version_gets_too_large(
        failing: tuple[ApiServer, FailingDb]) -> None:
    server, _ = failing
    c = http_client(server)
    future = server.store.rv + 1000
    r = c.get(f"{CM}?watch=true&resourceVersion={future}")
    event = orjson.loads(r.content.splitlines()[0])
    assert event["type"] == "ERROR"
    status = event["object"]
    assert status["code"] == 504 and status["reason"] == "Timeout"
    assert status["message"].startswith(f"Timeout: Too large resource version: {future}")
    assert status["details"]["retryAfterSeconds"] == 1
    assert status["details"]["causes"] == [{"reason": "ResourceVersionTooLarge",
                                            "message": "Too large resource version"}]
    r = c.get(f"{CM}?resourceVersion={future}&resourceVersionMatch=NotOlderThan")
    assert r.status_code == 504
    assert r.json()["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"
    c.close()


def test_list_honours_resource_version_match(failing: tuple[ApiServer, FailingDb]) -> None:
    server, _ = failing
    c = http_client(server)
    rv1 = c.post(CM, json={"metadata": {"name": "a"}, "data": {"v": "1"}}).json()[
        "metadata"]["resourceVersion"]
    c.post(CM, json={"metadata": {"name": "b"}})
    c.put(f"{CM}/a", json={"metadata": {"name": "a"}, "data": {"v": "2"}})
    c.post(CM, json={"metadata": {"name": "c", "labels": {"x": "y"}}})
    c.delete(f"{CM}/b")
    r = c.get(f"{CM}?resourceVersion={rv1}&resourceVersionMatch=Exact")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["metadata"]["resourceVersion"] == rv1
    assert [(o["metadata"]["name"], o["data"]) for o in body["items"]
            if o["metadata"]["name"] != ROOT_CA] == [("a", {"v": "1"})]
    now = c.get(CM).json()
    assert {o["metadata"]["name"] for o in now["items"]} - {ROOT_CA} == {"a", "c"}
    r = c.get(f"{CM}?resourceVersion={rv1}&resourceVersionMatch=NotOlderThan")
    assert {o["metadata"]["name"] for o in r.json()["items"]} - {ROOT_CA} == {"a", "c"}
    # Exact with a selector: the objects that matched it then.
    mid = now["metadata"]["resourceVersion"]
    c.patch(f"{CM}/a", json={"metadata": {"labels": {"x": "y"}}},
            headers={"Content-Type": "application/merge-patch+json"})
    r = c.get(f"{CM}?resourceVersion={mid}&resourceVersionMatch=Exact&labelSelector=x%3Dy")
    assert [o["metadata"]["name"] for o in r.json()["items"]] == ["c"]
    assert c.get(f"{CM}?resourceVersionMatch=Exact").status_code == 422
    assert c.get(f"{CM}?resourceVersion=0&resourceVersionMatch=Exact").status_code == 422
    assert c.get(f"{CM}?resourceVersion=1&resourceVersionMatch=Sometime").status_code == 422
    for i in range(210):  # the fixture's event log keeps 200 events
        c.post(CM, json={"metadata": {"name": f"filler-{i}"}})
    r = c.get(f"{CM}?resourceVersion={rv1}&resourceVersionMatch=Exact")
    assert r.status_code == 410 and r.json()["reason"] == "Expired"
    c.close()


class HeldDb(FailingDb):
    """Also holds COMMIT until `release` is set (a disk slow to fsync)."""

    def __init__(self, db: Any) -> None:
        super().__init__(db)
        self.release = threading.Event()
        self.holding = threading.Event()

    def execute(self, sql: str, *args: Any) -> Any:
        if sql == "COMMIT" and not self.release.is_set():
            self.holding.set()
            assert self.release.wait(30)
        return super().execute(sql, *args)


def _held(tmp_path: Path) -> tuple[ApiServer, HeldDb]:
    server = api_server(tmp_path, "127.0.0.1", 0, bookmark_interval=0.2)
    db = HeldDb(server.store.db)
    db.release.set()
    server.store.db = db  # type: ignore[assignment]
    server.start()
    return server, db


def _post_in_thread(server: ApiServer, name: str, codes: dict[str, int]) -> threading.Thread:
    def run() -> None:
        with http_client(server) as wc:
            codes[name] = wc.post(CM, json={"metadata": {"name": name}}).status_code

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_the_loop_serves_while_a_commit_waits_on_the_disk(tmp_path: Path) -> None:
    server, db = _held(tmp_path)
    try:
        c = http_client(server)
        assert c.post(CM, json={"metadata": {"name": "old"}}).status_code == 201
        events: list[dict[str, Any]] = []
        stop = threading.Event()
        _watch_lines(server, f"{CM}?watch=true&allowWatchBookmarks=true", events, stop)
        end = time.monotonic() + 10
        while not any(e["type"] == "BOOKMARK" for e in events):
            assert time.monotonic() < end
            time.sleep(0.02)
        db.release.clear()
        codes: dict[str, int] = {}
        first = _post_in_thread(server, "first", codes)
        assert db.holding.wait(10)  # its commit is on the writer thread, held
        rv = server.store.rv
        held_at = len(events)
        second = _post_in_thread(server, "second", codes)
        # the event loop still works: it takes the second create into the next group and
        # keeps the watch streaming (bookmarks), none of which waits for the disk
        end = time.monotonic() + 10
        while server.store.rv == rv or not any(
                e["type"] == "BOOKMARK" for e in events[held_at:]):
            assert time.monotonic() < end, (server.store.rv, events[held_at:])
            time.sleep(0.02)
        assert codes == {}  # nothing acknowledged while the commit is held
        names = [e["object"]["metadata"].get("name") for e in events if e["type"] != "BOOKMARK"]
        assert "first" not in names and "second" not in names  # nor shown to the watch
        db.release.set()
        first.join(10)
        second.join(10)
        assert codes == {"first": 201, "second": 201}
        end = time.monotonic() + 10
        while not {"first", "second"} <= {e["object"]["metadata"].get("name") for e in events}:
            assert time.monotonic() < end, events
            time.sleep(0.02)
        stop.set()
        c.close()
    finally:
        server.stop()


def test_a_failed_commit_also_undoes_the_writes_made_on_top_of_it(tmp_path: Path) -> None:
    server, db = _held(tmp_path)
    try:
        c = http_client(server)
        assert c.post(CM, json={"metadata": {"name": "kept"}, "data": {"v": "1"}}
                      ).status_code == 201
        db.release.clear()
        db.failing = True
        codes: dict[str, int] = {}
        first = _post_in_thread(server, "first", codes)
        assert db.holding.wait(10)
        # made while the first group's commit is in flight, on top of it in memory
        update = threading.Thread(target=lambda: codes.__setitem__("update", http_client(
            server).put(f"{CM}/kept", json={"metadata": {"name": "kept"},
                                            "data": {"v": "2"}}).status_code), daemon=True)
        update.start()
        second = _post_in_thread(server, "second", codes)
        time.sleep(0.3)
        db.release.set()
        for t in (first, update, second):
            t.join(10)
        assert codes == {"first": 503, "update": 503, "second": 503}
        db.failing = False
        assert c.get(f"{CM}/first").status_code == 404
        assert c.get(f"{CM}/second").status_code == 404
        assert c.get(f"{CM}/kept").json()["data"] == {"v": "1"}
        assert c.get("/readyz").status_code == 200
        assert c.post(CM, json={"metadata": {"name": "second"}}).status_code == 201
        c.close()
    finally:
        server.stop()
