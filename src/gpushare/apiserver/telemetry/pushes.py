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

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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
class _Family:
    header: bytes  # its "# HELP" and "# TYPE" lines
    kind: str
    samples: bytes  # its sample lines, labelled with the pusher


@dataclass(slots=True)
class _Push:
    families: dict[str, _Family]
    received: float
    ttl: float


_SAMPLE = re.compile(rb"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?[ \t]+(\S+)([ \t]+-?\d+)?$")
_META = re.compile(rb"^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*)(?: (.*))?$")
_KINDS = {b"counter", b"gauge", b"histogram", b"summary", b"untyped", b"info", b"stateset",
          b"gaugehistogram", b"unknown"}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def parse_exposition(text: bytes, labels: dict[str, str]) -> dict[str, _Family]:
    """Prometheus text exposition split into families, each sample line given ``labels``.

    A line-level pass (no float parsing, no re-rendering): a push is parsed once, when it
    arrives, and a scrape only joins bytes. Raises ValueError naming the bad line."""
    extra = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()).encode()
    families: dict[str, _Family] = {}
    current: _Family | None = None
    current_name = ""
    lines: list[bytes] = []

    def close() -> None:
        if current is not None:
            current.samples += b"".join(lines)

    for number, raw in enumerate(text.split(b"\n"), 1):
        line = raw.rstrip(b"\r")
        if not line.strip():
            continue
        if line.startswith(b"#"):
            meta = _META.match(line)
            if meta is None:
                continue  # a comment
            what, name = meta.group(1), meta.group(2).decode()
            if what == b"TYPE" and (meta.group(3) or b"") not in _KINDS:
                raise ValueError(f"line {number}: unknown metric type {meta.group(3)!r}")
            if name != current_name:
                close()
                lines = []
                current_name = name
                current = families.setdefault(name, _Family(b"", "untyped", b""))
            assert current is not None
            if not any(h.startswith(line[:6]) for h in current.header.splitlines()):
                current.header += line + b"\n"  # one HELP and one TYPE line per family
            if what == b"TYPE":
                current.kind = (meta.group(3) or b"untyped").decode()
            continue
        sample = _SAMPLE.match(line)
        if sample is None:
            raise ValueError(f"line {number}: not a sample: {line[:80]!r}")
        if current is None or not sample.group(1).decode().startswith(current_name):
            close()
            lines = []
            current_name = sample.group(1).decode()
            current = families.setdefault(current_name, _Family(b"", "untyped", b""))
        own = sample.group(2)
        merged = b"{" + extra + (b"," + own[1:] if own and own != b"{}" else b"}")
        lines.append(sample.group(1) + merged + b" " + sample.group(3)
                     + (sample.group(4) or b"") + b"\n")
    close()
    return {name: f for name, f in families.items()
            if not (f.kind == "gauge" and name.endswith("_created"))}


class ComponentMetrics:
    """The latest exposition pushed by each (component, instance), merged on render."""

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
            families = parse_exposition(text, {"component": component, "instance": instance})
        except ValueError as e:
            raise bad_request(f"body: not Prometheus text exposition: {e}") from e
        with self._lock:
            self._pushes[(component, instance)] = _Push(
                families, self._clock(), max(3 * seconds, MIN_TTL_SECONDS))
        return sum(f.samples.count(b"\n") for f in families.values())

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

    def render(self, exclude: frozenset[str] = frozenset()) -> bytes:
        """The union of every live push, one family per name (the first pusher's header;
        a pusher that disagrees on a family's type is left out of it); names in
        ``exclude`` (the server's own) are never taken from a push."""
        now = self._clock()
        pushes = self._fresh()
        out = [b"# HELP gpushare_component_push_age_seconds Seconds since each component's "
               b"last metrics push\n# TYPE gpushare_component_push_age_seconds gauge\n"]
        for (component, instance), push in pushes:
            out.append(f'gpushare_component_push_age_seconds{{component="{_escape(component)}",'
                       f'instance="{_escape(instance)}"}} {now - push.received:.3f}\n'.encode())
        merged: dict[str, tuple[_Family, list[bytes]]] = {}
        for _key, push in pushes:
            for name, family in push.families.items():
                if name in exclude:
                    continue
                have = merged.get(name)
                if have is None:
                    merged[name] = (family, [family.samples])
                elif have[0].kind == family.kind:
                    have[1].append(family.samples)
        for family, parts in merged.values():
            out.append(family.header)
            out.extend(parts)
        return b"".join(out)


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
