"""List+watch caches of API objects, with change callbacks, and a work queue.

An informer lists a resource, remembers the list's resourceVersion, then watches from it.
A watch that ends is resumed from the last version seen (bookmarks keep it fresh); a
``410 Gone`` means the server has compacted past it, so the informer lists again and
reports the difference against its cache as ordinary changes. Callbacks run on the
informer's thread and must be quick: controllers only enqueue keys there.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from gpushare.api.objects import Meta, Obj
from gpushare.kube.client import ApiError, KubeClient, Resource, Stopper, key_of

log = logging.getLogger(__name__)

# (event type "ADDED" | "MODIFIED" | "DELETED", new or deleted object, old object or None)
Handler = Callable[[str, Obj, Obj | None], None]


class Informer:
    """One resource's cache, kept current by list+watch on its own thread."""

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        stopper: Stopper,
        *,
        namespace: str | None = None,
        field_selector: str | None = None,
        watch_timeout_seconds: int = 300,
    ) -> None:
        self.client = client
        self.resource = resource
        self.path = resource.collection(namespace)
        #: Only the objects it selects are listed and watched (``spec.nodeName=n1``).
        self.field_selector = field_selector
        self.stopper = stopper
        self.watch_timeout_seconds = watch_timeout_seconds
        self._store: dict[str, Obj] = {}
        self._lock = threading.Lock()
        self._handlers: list[Handler] = []
        self._synced = threading.Event()
        self._abort: Callable[[], None] | None = None
        self._thread: threading.Thread | None = None
        self.resource_version = ""
        self.relists = 0

    # -- reading ------------------------------------------------------------------------

    def get(self, key: str) -> Obj | None:
        return self._store.get(key)

    def items(self) -> list[Obj]:
        with self._lock:
            return list(self._store.values())

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._store)

    def __len__(self) -> int:
        return len(self._store)

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    # -- running ------------------------------------------------------------------------

    def add_handler(self, handler: Handler) -> None:
        """Register a callback; it also receives ADDED for everything already cached."""
        with self._lock:
            self._handlers.append(handler)
            existing = list(self._store.values())
        for obj in existing:
            handler("ADDED", obj, None)

    def start(self, resume_from: str | None = None) -> None:
        """List, then watch; with ``resume_from``, first try watching from that version
        (a cache restored from elsewhere), listing only if the server has moved past it."""
        self._thread = threading.Thread(
            target=self._run, args=(resume_from,), name=f"informer-{self.resource.plural}",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        self.drop_connection()

    def drop_connection(self) -> None:
        """Close the current watch; unless stopping, the informer resumes it."""
        abort = self._abort
        if abort is not None:
            abort()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self, resume_from: str | None = None) -> None:
        backoff = 0.2
        need_list = resume_from is None
        if resume_from is not None:
            self.resource_version = resume_from
            self._synced.set()
        while not self.stopper.stopped:
            try:
                if need_list:
                    self._relist()
                    need_list = False
                self._watch_once()
                backoff = 0.2
            except ApiError as error:
                if error.gone:
                    need_list = True
                    continue
                log.warning("%s: %s; retrying", self.path, error)
                self.stopper.wait(backoff)
                backoff = min(backoff * 2, 5.0)
            except Exception as error:  # the connection dropped: resume from the last version
                if self.stopper.stopped:
                    break
                log.debug("%s watch ended: %r", self.path, error)
                self.stopper.wait(backoff)
                backoff = min(backoff * 2, 5.0)

    def _relist(self) -> None:
        query = {"fieldSelector": self.field_selector} if self.field_selector else {}
        listing = self.client.list(self.path, **query)
        items = listing.get("items") or []
        kind = self.resource_kind(listing)
        fresh: dict[str, Obj] = {}
        for item in items:
            if kind and "kind" not in item:
                item["kind"] = kind
            fresh[key_of(item)] = item
        with self._lock:
            old = self._store
            self._store = fresh
        self.resource_version = Meta.of(listing).resource_version
        self.relists += 1
        # Deletions first: what was freed in the gap (a GPU share, a name) is free before
        # the objects that may have taken it arrive, as the watch would have told it.
        for key, obj in old.items():
            if key not in fresh:
                self._emit("DELETED", obj, None)
        for key, obj in fresh.items():
            before = old.get(key)
            if before is None:
                self._emit("ADDED", obj, None)
            elif _version(before) != _version(obj):
                self._emit("MODIFIED", obj, before)
        self._synced.set()

    @staticmethod
    def resource_kind(listing: Obj) -> str:
        kind = str(listing.get("kind", ""))
        return kind[: -len("List")] if kind.endswith("List") else ""

    def _set_abort(self, abort: Callable[[], None]) -> None:
        self._abort = abort
        if self.stopper.stopped:
            abort()

    def _watch_once(self) -> None:
        events = self.client.watch(
            self.path,
            self.resource_version,
            timeout_seconds=self.watch_timeout_seconds,
            on_open=self._set_abort,
            field_selector=self.field_selector,
        )
        for event in events:
            if self.stopper.stopped:
                return
            kind = event.get("type")
            obj = event.get("object") or {}
            if kind == "ERROR":
                code = int(obj.get("code") or 0)
                raise ApiError(code or 500, str(obj.get("reason", "")), obj)
            version = _version(obj)
            if kind == "BOOKMARK":
                if version:
                    self.resource_version = version
                continue
            key = key_of(obj)
            with self._lock:
                old = self._store.get(key)
                if kind == "DELETED":
                    self._store.pop(key, None)
                else:
                    self._store[key] = obj
            if version:
                self.resource_version = version
            if kind == "DELETED":
                self._emit("DELETED", obj, None)
            elif kind in ("ADDED", "MODIFIED"):
                self._emit("ADDED" if old is None else "MODIFIED", obj, old)

    def _emit(self, kind: str, obj: Obj, old: Obj | None) -> None:
        for handler in self._handlers:
            try:
                handler(kind, obj, old)
            except Exception:
                log.exception("%s handler failed", self.path)


def _version(obj: Obj) -> str:
    # Per object of a relist and per watch event: a dict walk, not `Meta.of` (which costs
    # about 1 µs more a call).
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))


class WorkQueue:
    """Keys to reconcile, each queued at most once, with delayed re-adds."""

    def __init__(self) -> None:
        self._queue: deque[str] = deque()
        self._queued: set[str] = set()
        self._processing: set[str] = set()
        self._dirty_while_processing: set[str] = set()
        self._delayed: list[tuple[float, str]] = []
        self._cond = threading.Condition()
        self._closed = False

    def add(self, key: str) -> None:
        with self._cond:
            if key in self._processing:
                self._dirty_while_processing.add(key)
                return
            if key in self._queued:
                return
            self._queued.add(key)
            self._queue.append(key)
            self._cond.notify()

    def add_after(self, key: str, seconds: float) -> None:
        with self._cond:
            self._delayed.append((time.monotonic() + seconds, key))
            self._cond.notify()

    def get(self, timeout: float = 0.5) -> str | None:
        """The next key to work on, or None after ``timeout`` with nothing to do."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                self._promote_delayed()
                if self._queue:
                    key = self._queue.popleft()
                    self._queued.discard(key)
                    self._processing.add(key)
                    return key
                if self._closed:
                    return None
                now = time.monotonic()
                wait = deadline - now
                if self._delayed:
                    wait = min(wait, min(t for t, _ in self._delayed) - now)
                if wait <= 0 and now >= deadline:
                    return None
                self._cond.wait(max(wait, 0.001))

    def done(self, key: str) -> None:
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty_while_processing:
                self._dirty_while_processing.discard(key)
                if key not in self._queued:
                    self._queued.add(key)
                    self._queue.append(key)
                    self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue)

    def _promote_delayed(self) -> None:
        if not self._delayed:
            return
        now = time.monotonic()
        due = [key for t, key in self._delayed if t <= now]
        if not due:
            return
        self._delayed = [(t, key) for t, key in self._delayed if t > now]
        for key in due:
            if key in self._processing:
                self._dirty_while_processing.add(key)
            elif key not in self._queued:
                self._queued.add(key)
                self._queue.append(key)


def run_worker(
    queue: WorkQueue, reconcile: Callable[[str], None], stopper: Stopper, name: str
) -> None:
    """Reconcile keys until stopped; a failing key is retried with a growing delay."""
    failures: dict[str, int] = {}
    while not stopper.stopped:
        key = queue.get(0.5)
        if key is None:
            continue
        try:
            reconcile(key)
            failures.pop(key, None)
        except Exception as error:
            count = failures.get(key, 0) + 1
            failures[key] = count
            delay = min(0.05 * 2**count, 10.0)
            if isinstance(error, ApiError) and error.conflict:
                delay = 0.01  # a stale read: retry at once against the fresher cache
            log.warning("%s: %s failed (%s); retry in %.2fs", name, key, error, delay)
            queue.add_after(key, delay)
        finally:
            with contextlib.suppress(Exception):
                queue.done(key)


def start_workers(
    queue: WorkQueue, reconcile: Callable[[str], None], stopper: Stopper, name: str, count: int
) -> list[threading.Thread]:
    """``count`` threads reconciling from one queue (a key is never worked on twice at once),
    so that one slow API round trip does not hold up every other key."""
    threads = []
    for i in range(count):
        thread = threading.Thread(
            target=run_worker, args=(queue, reconcile, stopper, name),
            name=f"{name}-{i}", daemon=True,
        )
        thread.start()
        threads.append(thread)
    return threads
