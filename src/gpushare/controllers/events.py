"""Kubernetes Events, written off the caller's thread and deduplicated.

A scheduler that explains a pending pod every cycle would write an Event a second per
pod; the recorder writes an Event when the (object, reason, message) is new and at most
once a minute otherwise, bumping ``count`` like kubelet's recorder does.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from gpushare.api.objects import Meta
from gpushare.api.timefmt import rfc3339
from gpushare.kube.client import EVENTS, ApiError, KubeClient, Stopper

log = logging.getLogger(__name__)

REPEAT_SECONDS = 60.0
MAX_PENDING = 10000
MAX_REMEMBERED = 20000  # past this, forget what was written more than REPEAT_SECONDS ago


def now_rfc3339() -> str:
    return rfc3339(time.time())


@dataclass(slots=True)
class _Seen:
    name: str
    namespace: str
    count: int
    first: str
    written_at: float


class EventRecorder:
    def __init__(self, client: KubeClient, component: str, stopper: Stopper) -> None:
        self.client = client
        self.component = component
        self.stopper = stopper
        self._queue: queue.Queue[tuple[dict[str, Any], str, str, str]] = queue.Queue(MAX_PENDING)
        self._seen: dict[tuple[str, str, str], _Seen] = {}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"events-{component}", daemon=True)
        self.written = 0

    def start(self) -> None:
        self._thread.start()

    def emit(self, involved: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        """Queue an Event about ``involved`` (a pod, PodGroup, ...); never blocks."""
        meta = Meta.of(involved)
        key = (meta.uid or meta.name, reason, message)
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None and time.monotonic() - seen.written_at < REPEAT_SECONDS:
                return
        try:
            self._queue.put_nowait((involved, event_type, reason, message))
        except queue.Full:
            log.debug("event queue full; dropped %s %s", reason, meta.name)

    def _run(self) -> None:
        while not self.stopper.stopped:
            try:
                item = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            try:
                self._write(*item)
            except Exception as error:
                log.debug("event not written: %s", error)

    def _write(self, involved: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        meta = Meta.of(involved)
        namespace = meta.namespace or "default"
        key = (meta.uid or meta.name, reason, message)
        now = now_rfc3339()
        with self._lock:
            seen = self._seen.get(key)
        if seen is not None:
            if time.monotonic() - seen.written_at < REPEAT_SECONDS:
                return
            seen.count += 1
            try:
                self.client.merge_patch(
                    EVENTS.item(seen.name, seen.namespace),
                    {"count": seen.count, "lastTimestamp": now},
                )
                seen.written_at = time.monotonic()
                self.written += 1
                return
            except ApiError:
                pass  # expired or deleted: write a fresh one
        name = f"{meta.name or 'object'}.{uuid.uuid4().hex[:16]}"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": {
                "apiVersion": involved.get("apiVersion", "v1"),
                "kind": involved.get("kind", "Pod"),
                "name": meta.name,
                "namespace": namespace,
                "uid": meta.uid,
            },
            "reason": reason,
            "message": message,
            "type": event_type,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self.client.create(EVENTS.collection(namespace), body)
        self.written += 1
        with self._lock:
            self._seen[key] = _Seen(name, namespace, 1, now, time.monotonic())
            if len(self._seen) > MAX_REMEMBERED:
                cutoff = time.monotonic() - REPEAT_SECONDS
                self._seen = {k: v for k, v in self._seen.items() if v.written_at >= cutoff}
