"""What the other components report to the control plane: their Prometheus figures and the
node agents' resource measurements (the source of ``metrics.k8s.io``).

The controllers and the agents run as separate processes that already hold an
authenticated connection to the API server and may have no port of their own that the
server could reach (the controllers have none; an agent may sit behind NAT). So they
*push*: every few seconds each one PUTs its exposition text to
``/metrics/components/<component>/<instance>`` and (agents) its measurements to
``/metrics/resource/<node>``. The server keeps only the latest push of each, in memory (no
store writes, no watch events), parses it once when it arrives and serves the union on
``/metrics``; a push older than three of its announced intervals is dropped, so a
component that died does not look alive.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

from gpushare.apiserver.errors import ApiError, bad_request

MAX_PUSH_BYTES = 8 * 1024 * 1024
MIN_TTL_SECONDS = 15.0
DEFAULT_INTERVAL_SECONDS = 5.0


def _check_name(value: str, field: str) -> str:
    if not value or len(value) > 253 or not all(c.isalnum() or c in "-_.:" for c in value):
        raise bad_request(f"{field}: {value!r} is not a valid name (letters, digits, -_.:)")
    return value


def _interval(raw: str | None) -> float:
    if raw is None or raw == "":
        return DEFAULT_INTERVAL_SECONDS
    try:
        value = float(raw)
    except ValueError as e:
        raise bad_request(f"interval: {raw!r} is not a number of seconds") from e
    if not 0 < value <= 3600:
        raise bad_request(f"interval: {raw!r} must be in (0, 3600] seconds")
    return value


@dataclass(slots=True)
class _Push:
    families: list[Metric]
    received: float
    ttl: float


class ComponentMetrics:
    """The latest exposition pushed by each (component, instance), merged on collect."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._pushes: dict[tuple[str, str], _Push] = {}
        self._lock = threading.Lock()

    def push(self, component: str, instance: str, text: bytes, interval: str | None) -> int:
        _check_name(component, "component")
        _check_name(instance, "instance")
        if len(text) > MAX_PUSH_BYTES:
            raise ApiError(413, f"a metrics push is limited to {MAX_PUSH_BYTES} bytes",
                           "RequestEntityTooLarge")
        seconds = _interval(interval)
        try:
            families = [
                f for f in text_string_to_metric_families(text.decode())
                if not (f.type == "gauge" and f.name.endswith("_created"))
            ]
        except (ValueError, UnicodeDecodeError, IndexError, TypeError) as e:
            raise bad_request(f"body: not Prometheus text exposition: {e}") from e
        extra = {"component": component, "instance": instance}
        for family in families:
            family.samples = [s._replace(labels={**s.labels, **extra}) for s in family.samples]
        with self._lock:
            self._pushes[(component, instance)] = _Push(
                families, self._clock(), max(3 * seconds, MIN_TTL_SECONDS))
        return sum(len(f.samples) for f in families)

    def _fresh(self) -> list[tuple[tuple[str, str], _Push]]:
        now = self._clock()
        with self._lock:
            for key in [k for k, p in self._pushes.items() if now - p.received > p.ttl]:
                del self._pushes[key]
            return sorted(self._pushes.items())

    def components(self) -> list[tuple[str, str, float]]:
        """(component, instance, seconds since its last push) of each live pusher."""
        now = self._clock()
        return [(c, i, now - p.received) for (c, i), p in self._fresh()]

    def collect(self) -> Iterator[Metric]:
        """The union of every live push: one family per name, samples of all pushers."""
        merged: dict[str, Metric] = {}
        age = Metric("gpushare_component_push_age_seconds",
                     "Seconds since each component's last metrics push", "gauge")
        now = self._clock()
        for (component, instance), push in self._fresh():
            age.add_sample(age.name, {"component": component, "instance": instance},
                           now - push.received)
            for family in push.families:
                have = merged.get(family.name)
                if have is None:
                    have = Metric(family.name, family.documentation, family.type, family.unit)
                    merged[family.name] = have
                elif have.type != family.type:
                    continue  # two pushers disagree on a family's type: keep the first
                have.samples.extend(family.samples)
        yield age
        yield from merged.values()


# -- metrics.k8s.io ------------------------------------------------------------------------


@dataclass(slots=True)
class _Usage:
    report: dict[str, Any]
    received: float
    ttl: float


def _number(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise bad_request(f"{field}: must be a non-negative number")
    return float(value)


def validate_usage(node: str, body: Any) -> dict[str, Any]:
    """An agent's measurement report, checked field by field (nothing half-kept)."""
    if not isinstance(body, dict):
        raise bad_request("body: must be an object {node, pods, window, timestamp}")
    timestamp = body.get("timestamp")
    if not isinstance(timestamp, str) or not timestamp:
        raise bad_request("timestamp: must be an RFC 3339 time")
    out: dict[str, Any] = {"timestamp": timestamp,
                           "window": _number(body.get("window", 0), "window")}
    node_usage = body.get("node")
    if not isinstance(node_usage, dict):
        raise bad_request("node: must be an object {cpu, memory}")
    out["node"] = {"cpu": _number(node_usage.get("cpu"), "node.cpu"),
                   "memory": _number(node_usage.get("memory"), "node.memory")}
    pods = body.get("pods", [])
    if not isinstance(pods, list):
        raise bad_request("pods: must be a list")
    out_pods = []
    for i, pod in enumerate(pods):
        where = f"pods[{i}]"
        if not isinstance(pod, dict):
            raise bad_request(f"{where}: must be an object")
        namespace, name = pod.get("namespace"), pod.get("name")
        if not isinstance(namespace, str) or not namespace:
            raise bad_request(f"{where}.namespace: must be a name")
        if not isinstance(name, str) or not name:
            raise bad_request(f"{where}.name: must be a name")
        containers = pod.get("containers")
        if not isinstance(containers, list):
            raise bad_request(f"{where}.containers: must be a list")
        out_containers = []
        for j, c in enumerate(containers):
            cw = f"{where}.containers[{j}]"
            if not isinstance(c, dict) or not isinstance(c.get("name"), str):
                raise bad_request(f"{cw}.name: must be a name")
            out_containers.append({"name": c["name"],
                                   "cpu": _number(c.get("cpu"), f"{cw}.cpu"),
                                   "memory": _number(c.get("memory"), f"{cw}.memory"),
                                   "gpuMemory": _number(c.get("gpuMemory", 0),
                                                        f"{cw}.gpuMemory")})
        out_pods.append({"namespace": namespace, "name": name, "containers": out_containers})
    out["pods"] = out_pods
    out["node_name"] = node
    return out


def _cpu(cores: float) -> str:
    """Cores as a Kubernetes quantity the way metrics-server writes it (nanocores)."""
    return f"{max(round(cores * 1e9), 0)}n"


def _memory(num_bytes: float) -> str:
    kib = max(round(num_bytes / 1024), 0)
    return f"{kib}Ki"


class ResourceUsage:
    """The latest measurements of each node agent, served as NodeMetrics / PodMetrics."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._nodes: dict[str, _Usage] = {}
        self._lock = threading.Lock()

    def push(self, node: str, body: Any, interval: str | None) -> None:
        _check_name(node, "node")
        report = validate_usage(node, body)
        ttl = max(3 * _interval(interval), MIN_TTL_SECONDS)
        with self._lock:
            self._nodes[node] = _Usage(report, self._clock(), ttl)

    def _fresh(self) -> dict[str, dict[str, Any]]:
        now = self._clock()
        with self._lock:
            for key in [k for k, u in self._nodes.items() if now - u.received > u.ttl]:
                del self._nodes[key]
            return {k: u.report for k, u in sorted(self._nodes.items())}

    def node_metrics(self) -> list[dict[str, Any]]:
        out = []
        for name, report in self._fresh().items():
            out.append({
                "kind": "NodeMetrics", "apiVersion": "metrics.k8s.io/v1beta1",
                "metadata": {"name": name, "creationTimestamp": report["timestamp"],
                             "labels": {}},
                "timestamp": report["timestamp"], "window": f"{report['window']:g}s",
                "usage": {"cpu": _cpu(report["node"]["cpu"]),
                          "memory": _memory(report["node"]["memory"])},
            })
        return out

    def pod_metrics(self) -> list[dict[str, Any]]:
        out = []
        for report in self._fresh().values():
            for pod in report["pods"]:
                containers = [{
                    "name": c["name"],
                    "usage": {"cpu": _cpu(c["cpu"]), "memory": _memory(c["memory"]),
                              **({"nvidia.com/gpu-memory": _memory(c["gpuMemory"])}
                                 if c["gpuMemory"] else {})},
                } for c in pod["containers"]]
                out.append({
                    "kind": "PodMetrics", "apiVersion": "metrics.k8s.io/v1beta1",
                    "metadata": {"name": pod["name"], "namespace": pod["namespace"],
                                 "creationTimestamp": report["timestamp"], "labels": {}},
                    "timestamp": report["timestamp"], "window": f"{report['window']:g}s",
                    "containers": containers,
                })
        return out
