"""The agent's one writer to the API for its pods, the kubelet's status manager: statuses
(only the latest of a pod is sent), the final deletion once the processes are gone,
annotations and Events. Supervisors and the agent queue writes; one thread sends them, each
failed write retried on a back-off of its own while the others go on, so a slow or failing
API never holds up a pod's processes, nor one pod's failing write another pod's status.
"""

from __future__ import annotations

import heapq
import logging
import queue
import threading
import time
from typing import Any

from gpushare.api.objects import Meta
from gpushare.api.timefmt import rfc3339
from gpushare.kube.client import EVENTS, PODS, ApiError, KubeClient

log = logging.getLogger("gpushare.agent")

#: (kind, namespace, name, uid, payload), kind one of status, delete, annotations, event.
Write = tuple[str, str, str, str, Any]


class StatusSink:
    """What one pod's supervisor reports through: its statuses, its end and its events."""

    def __init__(self, writes: queue.Queue[Write], namespace: str, name: str,
                 uid: str, pod_ip: str | None = None) -> None:
        self._writes, self._ns, self._name, self._uid = writes, namespace, name, uid
        self._pod_ip = pod_ip  # the pod's own address (None: the node's network)

    def report(self, status: dict[str, Any]) -> None:
        if self._pod_ip is not None:
            status = {**status, "podIP": self._pod_ip, "podIPs": [{"ip": self._pod_ip}]}
        self._writes.put(("status", self._ns, self._name, self._uid, status))

    def terminated(self) -> None:
        self._writes.put(("delete", self._ns, self._name, self._uid, None))

    def event(self, reason: str, message: str, warning: bool = False) -> None:
        pod = {"metadata": {"namespace": self._ns, "name": self._name, "uid": self._uid}}
        self._writes.put(
            ("event", self._ns, self._name, self._uid,
             (pod, reason, message, "Warning" if warning else "Normal"))
        )


#: Attempts of one write before it is given up (logged); the back-off doubles from
#: RETRY_BASE_S up to RETRY_MAX_S between them.
MAX_ATTEMPTS = 6
RETRY_BASE_S = 0.2
RETRY_MAX_S = 10.0
#: Answers that a retry cannot change: the write is dropped at once (a 403 is logged).
FINAL_STATUSES = (400, 401, 403, 404, 405, 409, 413, 422)


class StatusWriter:
    """Sends the queued writes until ``stop`` is set and the queue is empty.

    A write that fails is put aside with its own back-off and retried later: the writes of
    other pods go on meanwhile, never waiting behind one pod's failing write. A refusal
    no retry can change (403, 404, 409, 422, ...) is given up at once, a 403 logged."""

    def __init__(self, kube: KubeClient, node_name: str, stop: threading.Event) -> None:
        self.kube = kube
        self.node_name = node_name
        self._stop = stop
        self.writes: queue.Queue[Write] = queue.Queue()
        # (when, sequence, attempts, first taken, write): writes waiting for their retry
        self._later: list[tuple[float, int, int, float, Write]] = []
        # when the status last written of each pod was first taken from the queue: an
        # older status retried after it is stale and dropped
        self._status_sent: dict[tuple[str, str], float] = {}
        self._seq = 0
        #: writes given up, with the last error (the latest 100)
        self.given_up: list[tuple[Write, str]] = []

    def _next(self) -> tuple[int, float, Write] | None:
        now = time.monotonic()
        if self._later and self._later[0][0] <= now:
            _, _, attempts, born, item = heapq.heappop(self._later)
            return attempts, born, item
        wait = min(0.2, self._later[0][0] - now) if self._later else 0.2
        try:
            return 0, now, self.writes.get(timeout=max(wait, 0.0))
        except queue.Empty:
            return None

    def run(self) -> None:
        while not (self._stop.is_set() and self.writes.empty() and not self._later):
            got = self._next()
            if got is None:
                continue
            attempts, born, (kind, namespace, name, uid, payload) = got
            if kind == "status":
                if self._status_sent.get((namespace, name), float("-inf")) > born:
                    continue  # a newer status of this pod was written meanwhile
                if not attempts:  # coalesce: only the latest status of a pod matters
                    payload = self._latest_status(namespace, name, payload)
            item: Write = (kind, namespace, name, uid, payload)
            try:
                self._send(item)
                if kind == "status":
                    self._status_sent[(namespace, name)] = born
                elif kind == "delete":
                    self._status_sent.pop((namespace, name), None)
            except ApiError as exc:
                if exc.status in FINAL_STATUSES:
                    self._give_up(item, exc, exc.status == 403)
                else:
                    self._retry(item, attempts + 1, born, exc)
            except Exception as exc:
                self._retry(item, attempts + 1, born, exc)

    def _send(self, item: Write) -> None:
        kind, namespace, name, uid, payload = item
        if kind == "status":
            self.kube.merge_patch(PODS.item(name, namespace, "status"), {"status": payload})
        elif kind == "delete":
            self._delete_pod_now(namespace, name, uid)
        elif kind == "annotations":
            self.kube.merge_patch(PODS.item(name, namespace),
                                  {"metadata": {"annotations": payload}})
        elif kind == "event":
            self.event(*payload)

    def _retry(self, item: Write, attempts: int, born: float, exc: BaseException) -> None:
        if attempts >= MAX_ATTEMPTS or self._stop.is_set():
            self._give_up(item, exc, True)
            return
        delay = min(RETRY_BASE_S * 2 ** (attempts - 1), RETRY_MAX_S)
        self._seq += 1
        heapq.heappush(self._later,
                       (time.monotonic() + delay, self._seq, attempts, born, item))

    def _give_up(self, item: Write, exc: BaseException, loud: bool) -> None:
        if loud:
            log.warning("API write %s %s/%s given up: %s", item[0], item[1], item[2], exc)
        self.given_up = [*self.given_up[-99:], (item, str(exc))]

    def _delete_pod_now(self, namespace: str, name: str, uid: str) -> None:
        """Finish a graceful deletion once the processes are gone (the kubelet's last step)."""
        try:
            self.kube.delete(PODS.item(name, namespace), uid=uid or None, grace_period_seconds=0)
        except ApiError as exc:
            if not exc.conflict:  # a newer pod of the same name: not ours to delete
                raise

    def _latest_status(self, namespace: str, name: str, payload: Any) -> Any:
        pending: list[tuple[str, str, str, str, Any]] = []
        while True:
            try:
                item = self.writes.get_nowait()
            except queue.Empty:
                break
            if item[0] == "status" and item[1] == namespace and item[2] == name:
                payload = item[4]
            else:
                pending.append(item)
        for item in pending:
            self.writes.put(item)
        return payload

    def event(self, pod: dict[str, Any], reason: str, message: str, kind: str = "Warning") -> None:
        meta = Meta.of(pod)
        now = time.time()
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{meta.name}.{time.time_ns():x}",
                "namespace": meta.namespace or "default",
            },
            "involvedObject": {
                "kind": pod.get("kind", "Pod"),
                "apiVersion": "v1",
                "namespace": meta.namespace or "default",
                "name": meta.name,
                "uid": meta.uid,
            },
            "reason": reason,
            "message": message[:1024],
            "type": kind,
            "count": 1,
            "firstTimestamp": rfc3339(now),
            "lastTimestamp": rfc3339(now),
            "source": {"component": "gpushare-agent", "host": self.node_name},
            "reportingComponent": "gpushare-agent",
            "reportingInstance": self.node_name,
        }
        if pod.get("kind") == "Node":  # cluster-scoped: its Events live in default
            del body["involvedObject"]["namespace"]
        try:
            self.kube.create(EVENTS.collection(Meta.of(body).namespace), body)
        except Exception as exc:
            log.warning("could not record event %s on %s: %s", reason, meta.name, exc)
