"""Watches: per-request filters fed from the store's event stream."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from gpushare.apiserver.errors import ApiError
from gpushare.apiserver.storage.selectors import (
    FieldRequirement,
    Requirement,
    fields_match,
    labels_match,
)
from gpushare.apiserver.storage.store import (
    ADDED,
    DELETED,
    MODIFIED,
    Event,
    Store,
    StoreUnavailable,
)

MAX_BACKLOG = 20_000


@dataclass(eq=False)
class Watcher:
    cluster: str
    gr: str
    namespace: str | None
    labels: tuple[Requirement, ...]
    fields: tuple[FieldRequirement, ...]
    # Events up to this resourceVersion are already in what the watch started from.
    min_rv: int = 0
    backlog: deque[tuple[str, dict[str, Any], bytes | None, int]] = field(
        default_factory=deque)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    overflowed: bool = False

    def matches(self, obj: dict[str, Any] | None) -> bool:
        if obj is None:
            return False
        if self.namespace is not None and obj["metadata"].get("namespace") != self.namespace:
            return False
        return labels_match(self.labels, obj) and fields_match(self.fields, obj)

    def offer(self, event: Event) -> None:
        if event.rv <= self.min_rv:
            return
        new_ok = self.matches(event.obj)
        if event.type == DELETED:
            if new_ok:
                self._push(DELETED, event)
            return
        old_ok = self.matches(event.old) if event.old is not None else False
        if new_ok and old_ok:
            self._push(MODIFIED, event)
        elif new_ok:
            self._push(ADDED, event)
        elif old_ok:
            # Left the selection: watchers see it as deleted, like Kubernetes.
            self._push(DELETED, event)

    def _push(self, typ: str, event: Event) -> None:
        if self.overflowed:
            return
        if len(self.backlog) >= MAX_BACKLOG:
            self.overflowed = True
        else:
            self.backlog.append((typ, event.obj, event.data, event.rv))
        self.ready.set()


class WatchHub:
    """Routes store events to the watchers of their (cluster, group/resource)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.watchers: dict[tuple[str, str], set[Watcher]] = {}
        self.closing = False
        store.listeners.append(self._dispatch)

    def close_all(self) -> None:
        """End every watch stream (server shutdown): clients reconnect elsewhere or later."""
        self.closing = True
        for watchers in self.watchers.values():
            for w in watchers:
                w.ready.set()

    @property
    def count(self) -> int:
        return sum(len(s) for s in self.watchers.values())

    def _dispatch(self, event: Event) -> None:
        watchers = self.watchers.get((event.cluster, event.gr))
        if watchers:
            for w in watchers:
                w.offer(event)

    def add(self, w: Watcher) -> None:
        self.watchers.setdefault((w.cluster, w.gr), set()).add(w)

    def remove(self, w: Watcher) -> None:
        ws = self.watchers.get((w.cluster, w.gr))
        if ws is not None:
            ws.discard(w)
            if not ws:
                del self.watchers[(w.cluster, w.gr)]


Encoder = Callable[[str, dict[str, Any], bytes | None], bytes]


async def stream(
    hub: WatchHub,
    watcher: Watcher,
    initial: list[tuple[str, dict[str, Any]]],
    encode: Encoder,
    timeout: float,
    bookmarks: bool,
    bookmark_object: Callable[[int, bool], dict[str, Any]],
    initial_events_end: bool,
    bookmark_interval: float,
) -> AsyncIterator[bytes]:
    """The watch response body: initial events, then live ones until the timeout.

    A bookmark carries only a resourceVersion this watch has delivered everything up to:
    the newest committed one while nothing is waiting to be sent, else the version of the
    last event sent. A client resuming from it therefore misses nothing.
    """
    deadline = time.monotonic() + timeout
    next_bookmark = time.monotonic() + bookmark_interval
    store = hub.store
    delivered = watcher.min_rv

    def progress() -> int:
        if watcher.backlog:
            return delivered
        return max(delivered, store.committed_rv)

    try:
        try:
            await store.durable()
        except StoreUnavailable as e:
            status = ApiError(503, str(e), "ServiceUnavailable").status_body()
            yield encode("ERROR", status, None)
            return
        if initial:
            yield b"".join(encode(t, o, None) for t, o in initial)
        if initial_events_end:
            yield encode("BOOKMARK", bookmark_object(progress(), True), None)
        while True:
            now = time.monotonic()
            if now >= deadline:
                return
            if watcher.backlog:
                batch: list[Any] = []
                while watcher.backlog and len(batch) < 500:
                    typ, obj, data, rv = watcher.backlog.popleft()
                    batch.append(encode(typ, obj, data))
                    delivered = rv
                yield b"".join(batch)
                continue
            if watcher.overflowed or hub.closing:
                return
            watcher.ready.clear()
            wait = deadline - now
            if bookmarks:
                wait = min(wait, max(0.0, next_bookmark - now))
            try:
                await asyncio.wait_for(watcher.ready.wait(), wait)
            except TimeoutError:
                if bookmarks and time.monotonic() >= next_bookmark:
                    next_bookmark = time.monotonic() + bookmark_interval
                    yield encode("BOOKMARK", bookmark_object(progress(), False), None)
    finally:
        hub.remove(watcher)


def encode_event(typ: str, obj: dict[str, Any], data: bytes | None = None) -> bytes:
    if data is not None:
        return b'{"type":"' + typ.encode() + b'","object":' + data + b"}\n"
    return orjson.dumps({"type": typ, "object": obj}) + b"\n"
