"""Getting a component's Prometheus figures to the control plane's ``/metrics``.

Each component keeps its own `prometheus_client` registry. A `MetricsPusher` renders it
every ``interval`` seconds (off the component's hot paths: its own thread) and PUTs the
text to ``/metrics/components/<component>/<instance>`` on the embedded API server, which
serves the union of the live pushes on ``/metrics``; a render that did not change is sent
again only every ``resend`` seconds, to stay fresh there. Against a server without that
endpoint (a real Kubernetes cluster) it stops after the first 404 and says so: there,
Prometheus scrapes each component's own endpoint (``--metrics-port``, `serve`).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    disable_created_metrics,
    generate_latest,
    start_http_server,
)
from prometheus_client.core import Metric

from gpushare.kube.client import ApiError, KubeClient, Stopper

log = logging.getLogger(__name__)

TEXT = "text/plain; version=0.0.4; charset=utf-8"
# Every component that pushes imports this module: none of their counters gets a
# ``_created`` series (a timestamp that a union of pushes would show as one more gauge).
disable_created_metrics()


class _Union:
    """A collector yielding the families of several registries (their names are disjoint)."""

    def __init__(self, registries: tuple[CollectorRegistry, ...]) -> None:
        self._registries = registries

    def collect(self) -> Iterator[Metric]:
        for registry in self._registries:
            yield from registry.collect()


def union_registry(*registries: CollectorRegistry) -> CollectorRegistry:
    """One registry to render or serve that reads all of ``registries``."""
    union = CollectorRegistry(auto_describe=False)
    union.register(_Union(registries))
    return union


def default_instance() -> str:
    """The ``instance`` label of a component's pushes: stable across restarts (a PID in it
    would start a new series at every restart), so the pod's name where Kubernetes gives
    one (``POD_NAME`` from the downward API), else the host's name."""
    return os.environ.get("POD_NAME") or socket.gethostname()


class MetricsPusher:
    def __init__(
        self,
        client: KubeClient,
        registry: CollectorRegistry,
        component: str,
        stopper: Stopper,
        *,
        instance: str | None = None,
        interval: float = 5.0,
        resend: float = 20.0,
        before: Callable[[], None] | None = None,
    ) -> None:
        self.client = client
        self.registry = registry
        self.component = component
        self.instance = instance or default_instance()
        self.stopper = stopper
        self.interval = interval
        self.resend = resend
        self.before = before  # refreshes gauges that are sampled rather than kept
        self.pushes = 0
        self.disabled = False
        self._last: bytes = b""
        self._since_sent = 0.0

    @property
    def path(self) -> str:
        return f"/metrics/components/{self.component}/{self.instance}"

    def push_once(self, force: bool = False) -> bool:
        """Render and send when changed (or stale there); True when something was sent."""
        if self.disabled:
            return False
        if self.before is not None:
            self.before()
        text = generate_latest(self.registry)
        if not force and text == self._last and self._since_sent < self.resend:
            self._since_sent += self.interval
            return False
        try:
            self.client.request("PUT", self.path, body=text, content_type=TEXT,
                                query=[("interval", f"{self.interval:g}")], timeout=10.0)
        except ApiError as error:
            if error.status == 404:
                self.disabled = True
                log.info("the API server takes no metrics pushes (%s); serve them with "
                         "--metrics-port instead", error)
                return False
            raise
        self._last = text
        self._since_sent = 0.0
        self.pushes += 1
        return True

    def _run(self) -> None:
        while not self.stopper.wait(self.interval):
            try:
                self.push_once()
            except Exception as error:  # the server restarting, a dropped connection
                log.debug("metrics push failed: %s", error)
        try:  # a last one, so the final counts reach the server
            self.push_once(force=True)
        except Exception as error:
            log.debug("final metrics push failed: %s", error)

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self._run, name=f"metrics-push-{self.component}",
                                  daemon=True)
        thread.start()
        return thread


def serve(registry: CollectorRegistry, port: int, address: str = "0.0.0.0") -> Any:
    """The component's own ``/metrics`` (for a Prometheus that scrapes it directly)."""
    server, _thread = start_http_server(port, addr=address, registry=registry)
    return server
