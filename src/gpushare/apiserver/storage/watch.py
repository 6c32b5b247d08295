"""Watches: per-request filters fed from the store's event stream."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from gpushare.apiserver.cooperative import Slicer
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
#: Bytes of events one watcher may have waiting to be sent (`--watch-backlog-bytes`): a
#: watcher past it is closed, as kube-apiserver closes a watcher too slow for its cache;
#: its client resumes from the last version it got, or re-lists.
DEFAULT_BACKLOG_BYTES = 16 * 1024 * 1024
#: what one write of a watch stream holds at most (plus one event)
BATCH_BYTES = 1024 * 1024


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
    #: the byte bound of the backlog (0: only the count bound, MAX_BACKLOG)
    max_bytes: int = DEFAULT_BACKLOG_BYTES
    backlog_bytes: int = 0
    #: called once when the watcher is closed for falling behind
    on_overflow: Callable[[Watcher], None] | None = None

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
        size = len(event.data)
        if self.max_bytes and self.backlog_bytes + size > self.max_bytes:
            # Too slow: drop what waits (its memory goes now) and end the stream.
            self.overflowed = True
            self.backlog.clear()
            self.backlog_bytes = 0
            if self.on_overflow is not None:
                self.on_overflow(self)
        elif len(self.backlog) >= MAX_BACKLOG:
            self.overflowed = True
        else:
            self.backlog.append((typ, event.obj, event.data, event.rv))
            self.backlog_bytes += size
        self.ready.set()

    def pop(self) -> tuple[str, dict[str, Any], bytes | None, int]:
        item = self.backlog.popleft()
        if item[2] is not None:
            self.backlog_bytes -= len(item[2])
        return item


class WatchHub:
    """Routes store events to the watchers of their (cluster, group/resource)."""

    def __init__(self, store: Store, max_backlog_bytes: int = DEFAULT_BACKLOG_BYTES,
                 slice_s: float | None = None) -> None:
        self.store = store
        self.watchers: dict[tuple[str, str], set[Watcher]] = {}
        self.closing = False
        self.max_backlog_bytes = max_backlog_bytes
        #: initial events are encoded in slices of this many seconds (None: in one go)
        self.slice_s = slice_s
        #: watchers closed for falling behind, by group/resource
        self.terminated: dict[str, int] = {}
        store.listeners.append(self._dispatch)

    def watcher(self, cluster: str, gr: str, namespace: str | None,
                labels: tuple[Requirement, ...], fields: tuple[FieldRequirement, ...],
                min_rv: int) -> Watcher:
        """A watcher bounded as this hub bounds them (not yet added)."""
        return Watcher(cluster, gr, namespace, labels, fields, min_rv=min_rv,
                       max_bytes=self.max_backlog_bytes, on_overflow=self._overflowed)

    def register(self, registry: CollectorRegistry) -> None:
        """`apiserver_terminated_watchers_total{resource}` on /metrics."""
        hub = self

        class _Terminated(Collector):
            def collect(self) -> Iterator[CounterMetricFamily]:
                family = CounterMetricFamily(
                    "apiserver_terminated_watchers", "Watchers closed because they fell "
                    "more than the backlog bound behind", labels=["resource"])
                for gr, n in sorted(hub.terminated.items()):
                    family.add_metric([gr], float(n))
                yield family
        registry.register(_Terminated())

    def _overflowed(self, w: Watcher) -> None:
        self.terminated[w.gr] = self.terminated.get(w.gr, 0) + 1
        self.remove(w)

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
            for w in list(watchers):  # an overflowing watcher leaves the set
                w.offer(event)

    def add(self, w: Watcher) -> None:
        if w.overflowed:
            return
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
            async for chunk in _initial_chunks(initial, encode, Slicer(hub.slice_s)):
                yield chunk
        if initial_events_end:
            yield encode("BOOKMARK", bookmark_object(progress(), True), None)
        while True:
            now = time.monotonic()
            if now >= deadline:
                return
            if watcher.overflowed or (hub.closing and not watcher.backlog):
                return
            if watcher.backlog:
                batch: list[Any] = []
                size = 0
                while watcher.backlog and len(batch) < 500 and size < BATCH_BYTES:
                    typ, obj, data, rv = watcher.pop()
                    batch.append(encode(typ, obj, data))
                    size += len(batch[-1])
                    delivered = rv
                yield b"".join(batch)
                continue
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


async def _initial_chunks(initial: list[tuple[str, dict[str, Any]]], encode: Encoder,
                          slicer: Slicer) -> AsyncIterator[bytes]:
    """The initial events in writes of about BATCH_BYTES, the loop free between slices."""
    batch: list[bytes] = []
    size = 0
    for typ, obj in initial:
        batch.append(encode(typ, obj, None))
        size += len(batch[-1])
        if size >= BATCH_BYTES:
            yield b"".join(batch)
            batch, size = [], 0
        await slicer.pause()
    if batch:
        yield b"".join(batch)


def encode_event(typ: str, obj: dict[str, Any], data: bytes | None = None) -> bytes:
    if data is not None:
        return b'{"type":"' + typ.encode() + b'","object":' + data + b"}\n"
    return orjson.dumps({"type": typ, "object": obj}) + b"\n"
