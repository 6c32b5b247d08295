"""Durable object store: SQLite (WAL) on disk, every object also held in memory.

Reads and watches are served from memory; each write is committed to SQLite before the
API acknowledges it or shows it to anybody. With `synchronous=FULL` (the default) every
group commit is fsynced, so an acknowledged write survives a power loss, as with etcd;
`synchronous=NORMAL` (opt-in) survives a crash of the process but a power loss may drop
the last transactions. A group whose commit fails is undone in memory: no reader or
watcher ever sees it, and the store reports itself unhealthy until a commit succeeds.
One global, monotonically increasing resourceVersion is kept in the `meta` table so that
it keeps increasing across restarts even after deletions.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import sqlite3
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger(__name__)

_PUT = "INSERT OR REPLACE INTO objects VALUES (?,?,?,?,?,?)"
_DELETE = "DELETE FROM objects WHERE cluster=? AND gr=? AND ns=? AND name=?"

ObjKey = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects
Bucket = dict[str, dict[str, dict[str, Any]]]  # namespace -> name -> object

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"


@dataclass(slots=True)
class Event:
    rv: int
    type: str
    cluster: str
    gr: str
    obj: dict[str, Any]
    old: dict[str, Any] | None
    data: bytes  # obj serialized once, shared by every watcher


Listener = Callable[[Event], None]
# Called with the events of a group whose commit failed, newest first, after memory has
# been restored to what it was before them.
RollbackListener = Callable[[list[Event]], None]

SYNC_MODES = ("full", "normal")
DEFAULT_EVENT_LOG_BYTES = 64 * 1024 * 1024


@dataclass(slots=True)
class _Batch:
    """One group commit: its SQL, its events, and the writer thread's answer."""

    ops: list[tuple[str, tuple[Any, ...]]]
    events: list[Event]
    future: Future[BaseException | None] | None = None


class StoreUnavailable(Exception):
    """The store could not commit: the writes were undone and nothing was acknowledged."""


class ObjectTooLarge(Exception):
    """An object's serialized form exceeds the store's limit on one object."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"the object is {size} bytes, over the limit of {limit} bytes")
        self.size = size
        self.limit = limit

# Fields of stored objects that are indexed for exact-match field selectors.
INDEXED_FIELDS: dict[str, tuple[str, ...]] = {
    "pods": ("spec.nodeName", "status.phase", "spec.schedulerName"),
}


def field_value(obj: dict[str, Any], path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def encode(obj: dict[str, Any]) -> bytes:
    """`obj` as JSON, in a bytes object of its own size.

    orjson returns its output in the buffer it wrote it to, at least 4 KiB however short
    the output (a 600-byte pod takes 4 KiB of memory): kept in the event log (50 000
    events) that was most of the server's memory under a long write load. A copy of the
    exact size costs one memcpy.
    """
    return memoryview(orjson.dumps(obj)).tobytes()


def _owner_uids(meta: dict[str, Any]) -> list[str]:
    # Tolerant of shapes validation refuses: objects stored by older versions still load.
    refs = meta.get("ownerReferences")
    if not refs or not isinstance(refs, list):
        return []
    return [r["uid"] for r in refs
            if isinstance(r, dict) and isinstance(r.get("uid"), str) and r["uid"]]


def _labels(meta: dict[str, Any]) -> list[tuple[str, str]]:
    labels = meta.get("labels")
    if not labels or not isinstance(labels, dict):
        return []
    return [(k, v) for k, v in labels.items() if isinstance(v, str)]


class Store:
    """All objects of all logical clusters, keyed (cluster, group/resource, namespace, name)."""

    def __init__(self, path: Path | str | None, event_log_size: int = 50_000, *,
                 sync: str = "full", event_log_bytes: int = DEFAULT_EVENT_LOG_BYTES,
                 max_object_bytes: int | None = None, transformer: Any = None,
                 commit_thread: bool = True) -> None:
        # Encryption at rest (apiserver/storage/encryption.py): encode/decode/stale on stored rows.
        self.transformer = transformer
        if sync not in SYNC_MODES:
            raise ValueError(f"sync must be one of {', '.join(SYNC_MODES)}, not {sync!r}")
        self.path = str(path) if path is not None else ":memory:"
        self.sync = sync
        self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(f"PRAGMA synchronous={sync.upper()}")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS objects (cluster TEXT NOT NULL, gr TEXT NOT NULL,"
            " ns TEXT NOT NULL, name TEXT NOT NULL, rv INTEGER NOT NULL, data BLOB NOT NULL,"
            " PRIMARY KEY (cluster, gr, ns, name))"
        )
        self.db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
        self.buckets: dict[tuple[str, str], Bucket] = {}
        self.owner_index: dict[tuple[str, str], set[tuple[str, str, str]]] = {}
        self.field_index: dict[tuple[str, str, str, str], set[ObjKey]] = {}
        self.label_index: dict[tuple[str, str, str, str], set[ObjKey]] = {}
        self.listeners: list[Listener] = []
        self.rollback_listeners: list[RollbackListener] = []
        self.rv = 0
        # The space quota (space.SpaceQuota), set by the server: admit/forget on writes.
        self.space: Any = None
        self._load()
        self.events: deque[Event] = deque()
        self.event_log_size = event_log_size
        # The log is bounded in bytes too (each event holds the object and its encoding).
        self.event_log_bytes = event_log_bytes
        self._event_bytes = 0
        self.max_object_bytes = max_object_bytes
        # Watches may start from any RV >= floor; older ones have fallen out of the log.
        self.floor_rv = self.rv
        # Every event up to this resourceVersion is committed and has been handed to the
        # listeners (watchers); writes above it are still waiting for their commit.
        self.committed_rv = self.rv
        # False from a failed commit until the next one that succeeds (`/readyz`).
        self.healthy = True
        self.last_error = ""
        self._failed_bytes = 0
        self.writes = 0
        self.commits = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self._pending: list[tuple[str, tuple[Any, ...]]] = []
        self._pending_events: list[Event] = []
        # (resourceVersion written before the wait began, its future)
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._flush_scheduled = False
        self._inflight: _Batch | None = None  # the group the writer thread commits now
        self._writer: ThreadPoolExecutor | None = None
        # False: commit on the event loop itself (the way before the writer thread; benches
        # compare the two).
        self.commit_thread = commit_thread

    # -- loading ---------------------------------------------------------------------------

    def _load(self) -> None:
        row = self.db.execute("SELECT value FROM meta WHERE key='rv'").fetchone()
        self.rv = int(row[0]) if row else 0
        stale: list[tuple[bytes, str, str, str, str]] = []
        for cluster, gr, ns, name, rv, data in self.db.execute("SELECT * FROM objects"):
            try:
                if self.transformer is not None:
                    if self.transformer.stale(gr, data):
                        stale.append((data, cluster, gr, ns, name))
                    data = self.transformer.decode(cluster, gr, ns, name, data)
                obj = orjson.loads(data)
                m = obj["metadata"]
                if not isinstance(m.get("name"), str) or not isinstance(
                        m.get("namespace") or "", str):
                    raise TypeError("metadata.name/namespace are not strings")
            except Exception as e:  # a row no reader could use: skip it, say which
                log.error("skipping stored object %s %s/%s/%s: %s", cluster, gr, ns, name, e)
                continue
            self._index_put(cluster, gr, obj)
            self.rv = max(self.rv, rv)
        if stale and self.transformer is not None:
            # Plain rows from before encryption, or rows of an older key: write them anew.
            self.db.execute("BEGIN")
            for data, cluster, gr, ns, name in stale:
                plain = self.transformer.decode(cluster, gr, ns, name, data)
                self.db.execute("UPDATE objects SET data=? WHERE cluster=? AND gr=? AND ns=? "
                                "AND name=?", (self.transformer.encode(cluster, gr, ns, name,
                                                                       plain),
                                               cluster, gr, ns, name))
            self.db.execute("COMMIT")

    def close(self) -> None:
        self.attach(None)
        self.db.close()

    # -- reads -----------------------------------------------------------------------------

    def get(self, cluster: str, gr: str, ns: str, name: str) -> dict[str, Any] | None:
        bucket = self.buckets.get((cluster, gr))
        if bucket is None:
            return None
        by_name = bucket.get(ns)
        return by_name.get(name) if by_name else None

    def list(self, cluster: str, gr: str, ns: str | None = None) -> Iterator[dict[str, Any]]:
        bucket = self.buckets.get((cluster, gr))
        if not bucket:
            return iter(())
        if ns is not None:
            return iter(list(bucket.get(ns, {}).values()))
        return iter([o for by_name in bucket.values() for o in by_name.values()])

    def list_indexed(
        self, cluster: str, gr: str, path: str, value: str
    ) -> builtins.list[dict[str, Any]] | None:
        """Objects whose indexed field `path` equals `value`; None if not indexed."""
        if path not in INDEXED_FIELDS.get(gr, ()):
            return None
        keys = self.field_index.get((cluster, gr, path, value), ())
        out = []
        for ns, name in keys:
            obj = self.get(cluster, gr, ns, name)
            if obj is not None:
                out.append(obj)
        return out

    def list_labeled(self, cluster: str, gr: str, key: str,
                     values: frozenset[str]) -> builtins.list[dict[str, Any]]:
        """Objects whose label `key` has one of `values`."""
        out = []
        for value in values:
            for ns, name in self.label_index.get((cluster, gr, key, value), ()):
                obj = self.get(cluster, gr, ns, name)
                if obj is not None:
                    out.append(obj)
        return out

    def label_count(self, cluster: str, gr: str, key: str, values: frozenset[str]) -> int:
        return sum(len(self.label_index.get((cluster, gr, key, v), ())) for v in values)

    def count(self, cluster: str, gr: str, ns: str | None = None) -> int:
        bucket = self.buckets.get((cluster, gr))
        if not bucket:
            return 0
        if ns is not None:
            return len(bucket.get(ns, ()))
        return sum(len(v) for v in bucket.values())

    def total_objects(self) -> int:
        return sum(len(v) for b in self.buckets.values() for v in b.values())

    def clusters(self) -> set[str]:
        return {c for (c, _gr) in self.buckets}

    def dependents(self, cluster: str, owner_uid: str) -> builtins.list[tuple[str, str, str]]:
        return list(self.owner_index.get((cluster, owner_uid), ()))

    # -- writes ----------------------------------------------------------------------------

    def put(self, cluster: str, gr: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Insert or replace `obj` (owned by the store from now on); sets its resourceVersion."""
        meta = obj["metadata"]
        ns = meta.get("namespace") or ""
        name = meta["name"]
        old = self.get(cluster, gr, ns, name)
        rv = self.rv + 1
        previous = meta.get("resourceVersion")
        meta["resourceVersion"] = str(rv)
        data = encode(obj)
        try:
            if self.max_object_bytes is not None and len(data) > self.max_object_bytes:
                raise ObjectTooLarge(len(data), self.max_object_bytes)
            row = (data if self.transformer is None
                   else self.transformer.encode(cluster, gr, ns, name, data))
            if self.space is not None:  # the space quota (space.py) may refuse growth
                self.space.admit((cluster, gr, ns, name), len(row))
        except BaseException:
            if previous is None:
                meta.pop("resourceVersion")
            else:
                meta["resourceVersion"] = previous
            raise
        self.rv = rv
        self.writes += 1
        if old is not None:
            self._index_remove(cluster, gr, old)
        self._index_put(cluster, gr, obj)
        self._pending.append((_PUT, (cluster, gr, ns, name, rv, row)))
        self._pending_events.append(
            Event(rv, MODIFIED if old is not None else ADDED, cluster, gr, obj, old, data))
        self._schedule_flush()
        return obj

    def delete(self, cluster: str, gr: str, ns: str, name: str) -> dict[str, Any] | None:
        old = self.get(cluster, gr, ns, name)
        if old is None:
            return None
        rv = self.rv + 1
        self.rv = rv
        self.writes += 1
        self._index_remove(cluster, gr, old)
        if self.space is not None:
            self.space.forget((cluster, gr, ns, name))
        gone = orjson.loads(orjson.dumps(old))
        gone["metadata"]["resourceVersion"] = str(rv)
        self._pending.append((_DELETE, (cluster, gr, ns, name)))
        self._pending_events.append(Event(rv, DELETED, cluster, gr, gone, old, encode(gone)))
        self._schedule_flush()
        return gone

    # -- group commit ----------------------------------------------------------------------
    #
    # Writes change memory at once and are committed to SQLite together: every write made
    # while one commit waits on the disk shares the next transaction. The commit (and its
    # fsync) runs on a writer thread of its own, so the event loop keeps serving requests
    # and watches meanwhile; at most one commit is in flight. Responses (reads included)
    # wait for `durable()`, and watch events are only emitted after the commit, so nobody
    # observes a write that a crash could lose. A failed commit undoes its writes and every
    # write made on top of them since (none of which was acknowledged).

    @property
    def pending(self) -> bool:
        return bool(self._pending) or self._inflight is not None

    def attach(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Commit in batches for `loop` (None: commit each write at once), on the store's
        writer thread unless it was made with `commit_thread=False`."""
        self.flush()
        self.loop = loop
        if loop is not None and self.commit_thread and self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="store-commit")
        elif loop is None and self._writer is not None:
            self._writer.shutdown(wait=True)
            self._writer = None

    def _schedule_flush(self) -> None:
        if self.loop is None:
            self.flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._start_commit)

    async def durable(self) -> None:
        """Return once every write made so far is committed."""
        if not self.pending:
            return
        assert self.loop is not None
        fut = self.loop.create_future()
        self._waiters.append((self.rv, fut))
        await fut

    def _start_commit(self) -> None:
        """Scheduled on the loop after writes: hand what is pending to the writer thread
        (unless a commit is in flight already: its end starts the next), or commit it
        here when the store has no writer thread."""
        self._flush_scheduled = False
        if self._writer is None or self.loop is None:
            self.flush()
            return
        if self._inflight is None and self._pending:
            batch = self._take()
            self._inflight = batch
            loop = self.loop
            batch.future = self._writer.submit(self._commit, batch)
            batch.future.add_done_callback(
                lambda _: loop.call_soon_threadsafe(self._committed, batch))

    def flush(self) -> None:
        """Commit everything pending on this thread, now (after the commit in flight)."""
        self._flush_scheduled = False
        self._finish_inflight()
        if self._pending:
            batch = self._take()
            self._finish(batch, self._commit(batch))

    def _take(self) -> _Batch:
        ops, self._pending = self._pending, []
        events, self._pending_events = self._pending_events, []
        return _Batch(ops, events)

    def _commit(self, batch: _Batch) -> BaseException | None:
        """One transaction of the batch's writes (on the writer thread, or inline)."""
        try:
            self.db.execute("BEGIN")
            for op, args in batch.ops:
                self.db.execute(op, args)
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('rv', ?)",
                            (str(batch.events[-1].rv),))
            self.db.execute("COMMIT")
        except Exception as e:
            with contextlib.suppress(Exception):
                self.db.execute("ROLLBACK")
            return e
        return None

    def _committed(self, batch: _Batch) -> None:
        """On the loop: the writer thread is done with `batch`."""
        if self._inflight is not batch:
            return  # already finished by `_finish_inflight`
        self._inflight = None
        assert batch.future is not None
        self._finish(batch, batch.future.result())
        if self._pending and not self._flush_scheduled:
            self._start_commit()  # what accumulated meanwhile: the next group

    def _finish_inflight(self) -> None:
        """Wait here for the commit in flight, if any, and finish it."""
        batch = self._inflight
        if batch is not None and batch.future is not None:
            error = batch.future.result()
            self._inflight = None
            self._finish(batch, error)

    def _finish(self, batch: _Batch, error: BaseException | None) -> None:
        """Make a committed batch visible, or undo a failed one (and all after it)."""
        events = batch.events
        if error is None:
            if events:
                self.commits += 1
                if not self.healthy:
                    log.warning("the store commits again")
                self.healthy = True
                self.committed_rv = events[-1].rv
                for event in events:
                    self._emit(event)
            done = [(rv, fut) for rv, fut in self._waiters if rv <= self.committed_rv]
            self._waiters = [(rv, fut) for rv, fut in self._waiters if rv > self.committed_rv]
            for _rv, fut in done:
                if not fut.done():
                    fut.set_result(None)
            return
        # Writes made on top of the failed ones were not sent yet: they go with them.
        undone = events + self._pending_events
        ops = batch.ops + self._pending
        self._pending, self._pending_events = [], []
        self._undo(undone)
        self._failed_bytes = min(sum(len(a[-1]) for op, a in ops if op is _PUT),
                                 16 * 1024 * 1024)
        self.healthy = False
        self.last_error = str(error)
        log.error("committing %d writes failed, undone: %s", len(ops), error)
        failure = StoreUnavailable(f"the write could not be committed: {error}")
        waiters, self._waiters = self._waiters, []
        for _rv, fut in waiters:
            if not fut.done():
                fut.set_exception(failure)
        if self.loop is None:
            raise failure

    def _undo(self, events: builtins.list[Event]) -> None:
        """Put memory back as it was before `events` (a group whose commit failed)."""
        undone = builtins.list(reversed(events))
        for event in undone:
            m = event.obj["metadata"]
            ns, name = m.get("namespace") or "", m["name"]
            if event.type != DELETED:
                current = self.get(event.cluster, event.gr, ns, name)
                if current is not None:
                    self._index_remove(event.cluster, event.gr, current)
            if event.old is not None:
                self._index_put(event.cluster, event.gr, event.old)
        for listener in self.rollback_listeners:
            try:
                listener(undone)
            except Exception:
                log.exception("rollback listener failed")

    def probe(self) -> bool:
        """Whether the store can commit now (`/readyz`).

        While unhealthy, commits (and removes) a probe as large as the group that failed:
        ready again means that write would fit now, not only that a few bytes would.
        """
        if self.healthy:
            return True
        if self.pending:
            return False
        try:
            for sql, args in (
                ("INSERT OR REPLACE INTO meta VALUES ('probe', randomblob(?))",
                 (max(self._failed_bytes, 4096),)),
                ("DELETE FROM meta WHERE key='probe'", ()),
            ):
                self.db.execute("BEGIN")
                self.db.execute(sql, args)
                self.db.execute("COMMIT")
        except Exception as e:
            with contextlib.suppress(Exception):
                self.db.execute("ROLLBACK")
            self.last_error = str(e)
            return False
        self.healthy = True
        log.warning("the store commits again")
        return True

    # -- events ----------------------------------------------------------------------------

    def _emit(self, event: Event) -> None:
        events = self.events
        events.append(event)
        self._event_bytes += len(event.data)
        if len(events) > self.event_log_size or self._event_bytes > self.event_log_bytes:
            while events and (len(events) > self.event_log_size
                              or self._event_bytes > self.event_log_bytes):
                dropped = events.popleft()
                self._event_bytes -= len(dropped.data)
                self.floor_rv = dropped.rv
        for listener in self.listeners:
            listener(event)

    def changes_since(self, rv: int) -> builtins.list[Event] | None:
        """Like `events_since`, plus the writes still waiting for their commit."""
        events = self.events_since(rv)
        if events is None:
            return None
        inflight = self._inflight.events if self._inflight is not None else []
        return events + [e for e in (*inflight, *self._pending_events) if e.rv > rv]

    def events_since(self, rv: int) -> builtins.list[Event] | None:
        """Events with resourceVersion > rv, or None if some of them are no longer kept."""
        if rv < self.floor_rv:
            return None
        if not self.events or rv >= self.events[-1].rv:
            return []
        # Events are ordered by rv; scan from the newest end, which is where watches resume.
        out: list[Event] = []
        for event in reversed(self.events):
            if event.rv <= rv:
                break
            out.append(event)
        out.reverse()
        return out

    # -- indexes ---------------------------------------------------------------------------

    def _index_put(self, cluster: str, gr: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        ns = meta.get("namespace") or ""
        name = meta["name"]
        self.buckets.setdefault((cluster, gr), {}).setdefault(ns, {})[name] = obj
        for uid in _owner_uids(meta):
            self.owner_index.setdefault((cluster, uid), set()).add((gr, ns, name))
        for path in INDEXED_FIELDS.get(gr, ()):
            self.field_index.setdefault((cluster, gr, path, field_value(obj, path)), set()).add(
                (ns, name)
            )
        for key, value in _labels(meta):
            self.label_index.setdefault((cluster, gr, key, value), set()).add((ns, name))

    def _index_remove(self, cluster: str, gr: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        ns = meta.get("namespace") or ""
        name = meta["name"]
        bucket = self.buckets.get((cluster, gr))
        if bucket is not None:
            by_name = bucket.get(ns)
            if by_name is not None:
                by_name.pop(name, None)
                if not by_name:
                    del bucket[ns]
        for uid in _owner_uids(meta):
            deps = self.owner_index.get((cluster, uid))
            if deps is not None:
                deps.discard((gr, ns, name))
                if not deps:
                    del self.owner_index[(cluster, uid)]
        for path in INDEXED_FIELDS.get(gr, ()):
            key = (cluster, gr, path, field_value(obj, path))
            keys = self.field_index.get(key)
            if keys is not None:
                keys.discard((ns, name))
                if not keys:
                    del self.field_index[key]
        for label, value in _labels(meta):
            lkey = (cluster, gr, label, value)
            keys = self.label_index.get(lkey)
            if keys is not None:
                keys.discard((ns, name))
                if not keys:
                    del self.label_index[lkey]
