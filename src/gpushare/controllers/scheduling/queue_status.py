"""Queue status: fair share, allocated, requested and child queues on every Queue.

The figures come from the scheduler loop's latest cycle (the same fair-share division the
scheduler acts on, rolled up through the tree by the core); this controller writes them
as KAI-style ResourceLists (``nvidia.com/gpu: 330m``) when they change, so that
``kubectl get queues`` shows each team's share.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from gpushare.api.objects import Obj
from gpushare.controllers.scheduling.scheduler_loop import SchedulerLoop
from gpushare.kube.client import QUEUES, ApiError, KubeClient, Stopper
from gpushare.kube.informers import InformerFactory

log = logging.getLogger(__name__)



def children_of(queues: list[Obj]) -> dict[str, list[str]]:
    children: dict[str, list[str]] = {}
    for queue in queues:
        parent = (queue.get("spec") or {}).get("parentQueue")
        if parent:
            children.setdefault(str(parent), []).append(str(queue["metadata"]["name"]))
    return {name: sorted(kids) for name, kids in children.items()}


def desired_status(
    name: str, figures: dict[str, dict[str, str]] | None, children: list[str]
) -> dict[str, Any]:
    status: dict[str, Any] = {"childQueues": children}
    if figures is not None:
        status.update(figures)
    return status


def status_differs(current: Obj, wanted: Obj) -> bool:
    status = current.get("status") or {}
    return any(status.get(f) != wanted.get(f) for f in wanted)


class QueueStatusController:
    name = "queue-status"

    def __init__(
        self, client: KubeClient, informers: InformerFactory, stopper: Stopper,
        loop: SchedulerLoop, min_interval: float = 0.25,
    ) -> None:
        self.client = client
        self.stopper = stopper
        self.loop = loop
        self.min_interval = min_interval
        self.queues = informers.get(QUEUES)
        self._dirty = threading.Event()
        self.queues.add_handler(lambda *_: self._dirty.set())
        self.writes = 0

    def start(self) -> list[threading.Thread]:
        thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        thread.start()
        return [thread]

    def _run(self) -> None:
        seen_version = -1
        while not self.stopper.stopped:
            with self.loop.figures_changed:
                if self.loop.figures.version == seen_version and not self._dirty.is_set():
                    self.loop.figures_changed.wait(1.0)
            self._dirty.clear()
            seen_version = self.loop.figures.version
            try:
                self.sync()
            except Exception:
                log.exception("queue status sync failed")
            self.stopper.wait(self.min_interval)

    def sync(self) -> int:
        """Write every Queue whose status differs from the latest figures."""
        queues = self.queues.items()
        children = children_of(queues)
        reports = self.loop.figures.reports
        written = 0
        for queue in queues:
            name = str(queue["metadata"]["name"])
            wanted = desired_status(name, reports.get(name), children.get(name, []))
            if not status_differs(queue, wanted):
                continue
            try:
                self.client.merge_patch(QUEUES.item(name, sub="status"), {"status": wanted})
            except ApiError as error:
                if error.not_found:
                    continue
                raise
            written += 1
        self.writes += written
        return written
