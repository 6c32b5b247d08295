"""Property: a client that resumes its watch from every bookmark, while several writers
change objects at once, ends with every acknowledged write seen and the server's state."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from apiserver_harness import http_client
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from gpushare.apiserver.http.server import ApiServer
from gpushare.cli.compose import api_server

_namespaces = itertools.count()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    # Bookmarks every 10 ms: many of them fall while writes are waiting for their commit.
    srv = api_server(tmp_path_factory.mktemp("resume"), "127.0.0.1", 0,
                    bookmark_interval=0.01)
    srv.start()
    yield srv
    srv.stop()


class Resumer:
    """Watches a namespace's ConfigMaps; after every bookmark, reconnects from it."""

    def __init__(self, server: ApiServer, ns: str, rv: str) -> None:
        self.server, self.ns, self.rv = server, ns, rv
        self.state: dict[str, str] = {}
        self.seen: set[str] = set()
        self.resumes = 0
        self.errors: list[dict[str, Any]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with http_client(self.server) as c:
            while not self.stop.is_set():
                path = (f"/api/v1/namespaces/{self.ns}/configmaps?watch=true"
                        f"&allowWatchBookmarks=true&resourceVersion={self.rv}")
                try:
                    with c.stream("GET", path, timeout=30) as r:
                        for line in r.iter_lines():
                            if not line:
                                continue
                            if self._event(orjson.loads(line)) or self.stop.is_set():
                                break
                except httpx.HTTPError:
                    continue
                self.resumes += 1

    def _event(self, event: dict[str, Any]) -> bool:
        obj = event["object"]
        if event["type"] == "ERROR":
            self.errors.append(obj)
            self.stop.set()
            return True
        rv = obj["metadata"]["resourceVersion"]
        self.rv = rv
        if event["type"] == "BOOKMARK":
            return True  # resume from the bookmark's version
        self.seen.add(rv)
        name = obj["metadata"]["name"]
        if event["type"] == "DELETED":
            self.state.pop(name, None)
        else:
            self.state[name] = rv
        return False


ops = st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["put", "put", "delete"])),
               min_size=10, max_size=40)


# No shrinking: a failing example already names what was lost, and each takes seconds.
@settings(max_examples=10, derandomize=True,
          phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(st.lists(ops, min_size=2, max_size=4))
def test_resuming_from_bookmarks_loses_nothing(server: ApiServer,
                                               writers: list[list[tuple[int, str]]]) -> None:
    ns = f"resume-{next(_namespaces)}"
    with http_client(server) as c:
        assert c.post("/api/v1/namespaces", json={"metadata": {"name": ns}}).status_code == 201
        start = c.get(f"/api/v1/namespaces/{ns}/configmaps").json()["metadata"][
            "resourceVersion"]
    resumer = Resumer(server, ns, start)
    acked: set[str] = set()
    lock = threading.Lock()

    def write(w: int, plan: list[tuple[int, str]]) -> None:
        base = f"/api/v1/namespaces/{ns}/configmaps"
        with http_client(server) as wc:
            for i, (n, op) in enumerate(plan):
                name = f"w{w}-{n}"
                if op == "delete":
                    wc.delete(f"{base}/{name}")
                    continue
                body = {"metadata": {"name": name}, "data": {"i": str(i)}}
                r = wc.put(f"{base}/{name}", json=body)
                if r.status_code == 404:
                    r = wc.post(base, json=body)
                if r.status_code in (200, 201):
                    with lock:
                        acked.add(r.json()["metadata"]["resourceVersion"])

    threads = [threading.Thread(target=write, args=(w, plan)) for w, plan in enumerate(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with http_client(server) as c:
        final = {o["metadata"]["name"]: o["metadata"]["resourceVersion"]
                 for o in c.get(f"/api/v1/namespaces/{ns}/configmaps").json()["items"]
                 if o["metadata"]["name"] != "kube-root-ca.crt"}  # made before the watch
    deadline = time.monotonic() + 5
    while (resumer.state != final or not acked <= resumer.seen) and not resumer.errors:
        if time.monotonic() > deadline:
            break
        time.sleep(0.02)
    resumer.stop.set()
    assert not resumer.errors, resumer.errors
    assert acked - resumer.seen == set(), f"lost {len(acked - resumer.seen)} of {len(acked)}"
    assert resumer.state == final
    assert resumer.resumes > 0


