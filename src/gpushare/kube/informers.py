"""Informers shared by the controllers of one process: one list+watch per resource."""

from __future__ import annotations

import threading

from gpushare.kube.client import KubeClient, Resource, Stopper
from gpushare.kube.informer import Informer


class InformerFactory:
    def __init__(self, client: KubeClient, stopper: Stopper) -> None:
        self.client = client
        self.stopper = stopper
        self._informers: dict[str, Informer] = {}
        self._lock = threading.Lock()
        self._started = False

    def get(self, resource: Resource) -> Informer:
        """The informer for ``resource``, made (and started, once running) on first use."""
        key = resource.collection()
        with self._lock:
            informer = self._informers.get(key)
            if informer is None:
                informer = Informer(self.client, resource, self.stopper)
                self._informers[key] = informer
                if self._started:
                    informer.start()
            return informer

    def existing(self, resource: Resource) -> Informer | None:
        """The informer for ``resource`` if some controller asked for one (and it has
        listed), without starting a new watch."""
        with self._lock:
            informer = self._informers.get(resource.collection())
        return informer if informer is not None and informer.synced else None

    def start(self) -> None:
        with self._lock:
            self._started = True
            informers = list(self._informers.values())
        for informer in informers:
            informer.start()

    def wait_synced(self, timeout: float) -> bool:
        with self._lock:
            informers = list(self._informers.values())
        return all(informer.wait_synced(timeout) for informer in informers)

    def stop(self) -> None:
        with self._lock:
            informers = list(self._informers.values())
        for informer in informers:
            informer.stop()
        for informer in informers:
            informer.join(2.0)
