"""Writing an object straight into a running API server's store, bypassing the API and
its admission and validation (as a store edit, or an older version's write, would)."""

from __future__ import annotations

import threading
from typing import Any

import orjson

from gpushare.apiserver.http.server import ApiServer


def store_put(server: ApiServer, gr: str, obj: dict[str, Any], cluster: str = "root") -> None:
    """Put `obj` into the store from the server's own event loop; its watchers see it."""
    loop = server.store.loop
    assert loop is not None, "the server is not running"
    done = threading.Event()

    def put() -> None:
        server.store.put(cluster, gr, orjson.loads(orjson.dumps(obj)))
        done.set()

    loop.call_soon_threadsafe(put)
    assert done.wait(10), "the store write did not run"
