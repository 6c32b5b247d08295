"""Prometheus metrics of one API server (own registry: several servers may share a process)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest


class Metrics:
    def __init__(self, watch_count: Callable[[], int], object_count: Callable[[], int],
                 resource_version: Callable[[], int], writes: Callable[[], int],
                 commits: Callable[[], int]) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "apiserver_request_total", "API requests by verb, resource and response code",
            ("verb", "resource", "code"), registry=self.registry)
        self.latency = Histogram(
            "apiserver_request_duration_seconds", "API request latency by verb and resource",
            ("verb", "resource"), registry=self.registry,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0))
        watches = Gauge("apiserver_watches", "Open watch streams", registry=self.registry)
        watches.set_function(lambda: float(watch_count()))
        objects = Gauge("apiserver_storage_objects", "Objects in the store",
                        registry=self.registry)
        objects.set_function(lambda: float(object_count()))
        rv = Gauge("apiserver_resource_version", "Current global resourceVersion",
                   registry=self.registry)
        rv.set_function(lambda: float(resource_version()))
        w = Gauge("apiserver_storage_writes", "Object writes since start",
                  registry=self.registry)
        w.set_function(lambda: float(writes()))
        c = Gauge("apiserver_storage_commits", "SQLite transactions since start (writes are "
                  "committed in groups)", registry=self.registry)
        c.set_function(lambda: float(commits()))

    def observe(self, verb: str, resource: str, code: int, seconds: float) -> None:
        self.requests.labels(verb, resource, str(code)).inc()
        self.latency.labels(verb, resource).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
