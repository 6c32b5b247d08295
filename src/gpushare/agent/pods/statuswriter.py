"""The agent's one writer to the API for its pods, the kubelet's status manager: statuses
(only the latest of a pod is sent), the final deletion once the processes are gone,
annotations and Events. Supervisors and the agent queue writes; one thread sends them, with
a few retries, so a slow or failing API never holds up a pod's processes.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any

from gpushare.kube.client import EVENTS, PODS, ApiError, KubeClient
from gpushare.kube.timefmt import rfc3339

log = logging.getLogger("gpushare.agent")

#: (kind, namespace, name, uid, payload), kind one of status, delete, annotations, event.
Write = tuple[str, str, str, str, Any]


class StatusSink:
    """What one pod's supervisor reports through: its statuses, its end and its events."""

    def __init__(self, writes: queue.Queue[Write], namespace: str, name: str,
                 uid: str) -> None:
        self._writes, self._ns, self._name, self._uid = writes, namespace, name, uid

    def report(self, status: dict[str, Any]) -> None:
        self._writes.put(("status", self._ns, self._name, self._uid, status))

    def terminated(self) -> None:
        self._writes.put(("delete", self._ns, self._name, self._uid, None))

    def event(self, reason: str, message: str, warning: bool = False) -> None:
        pod = {"metadata": {"namespace": self._ns, "name": self._name, "uid": self._uid}}
        self._writes.put(
            ("event", self._ns, self._name, self._uid,
             (pod, reason, message, "Warning" if warning else "Normal"))
        )


class StatusWriter:
    """Sends the queued writes until ``stop`` is set and the queue is empty."""

    def __init__(self, kube: KubeClient, node_name: str, stop: threading.Event) -> None:
        self.kube = kube
        self.node_name = node_name
        self._stop = stop
        self.writes: queue.Queue[Write] = queue.Queue()

    def run(self) -> None:
        while not (self._stop.is_set() and self.writes.empty()):
            try:
                kind, namespace, name, uid, payload = self.writes.get(timeout=0.2)
            except queue.Empty:
                continue
            # coalesce: only the latest status of a pod matters
            if kind == "status":
                payload = self._latest_status(namespace, name, payload)
            for attempt in range(5):
                try:
                    if kind == "status":
                        self.kube.merge_patch(
                            PODS.item(name, namespace, "status"), {"status": payload}
                        )
                    elif kind == "delete":
                        self._delete_pod_now(namespace, name, uid)
                    elif kind == "annotations":
                        self.kube.merge_patch(
                            PODS.item(name, namespace), {"metadata": {"annotations": payload}}
                        )
                    elif kind == "event":
                        self.event(*payload)
                    break
                except ApiError as exc:
                    if exc.status in (404, 409, 422):
                        break
                    time.sleep(0.2 * (attempt + 1))
                except Exception as exc:
                    log.warning("API write %s %s/%s failed: %s", kind, namespace, name, exc)
                    time.sleep(0.2 * (attempt + 1))

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
        meta = pod.get("metadata") or {}
        now = time.time()
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{meta.get('name')}.{time.time_ns():x}",
                "namespace": meta.get("namespace", "default"),
            },
            "involvedObject": {
                "kind": pod.get("kind", "Pod"),
                "apiVersion": "v1",
                "namespace": meta.get("namespace", "default"),
                "name": meta.get("name"),
                "uid": meta.get("uid"),
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
            self.kube.create(EVENTS.collection(body["metadata"]["namespace"]), body)
        except Exception as exc:
            log.warning("could not record event %s on %s: %s", reason, meta.get("name"), exc)
