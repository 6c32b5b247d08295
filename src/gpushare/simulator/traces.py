"""Cluster traces: nodes and pods from the Alibaba ``openb`` CSV format
(``cluster-trace-gpu-v2023``) or gpushare's own JSON-lines trace format, and their model
objects (``docs/traces.md``).

openb nodes: ``sn,cpu_milli,memory_mib,gpu,model``; openb pods: ``name,cpu_milli,
memory_mib,num_gpu,gpu_milli`` and optionally ``gpu_spec`` (GPU models allowed, ``|``-
separated), ``qos``, ``pod_phase``, ``creation_time``, ``deletion_time``,
``scheduled_time`` (seconds). gpushare trace lines: ``{"kind": "Node", "name", "cpuMillis",
"memoryMiB", "gpus", "gpuProduct"}`` and ``{"kind": "Pod", "name", "cpuMillis",
"memoryMiB", "gpus", "gpuMilli", "gpuProducts", "queue", "qos", "createdAt",
"deletedAt"}``. A bad row is reported with its file and line and the field.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from gpushare.model.job import Job
from gpushare.model.node import Node
from gpushare.model.pod import GpuRequest, Pod
from gpushare.model.quantities import MIB, MILLI
from gpushare.scheduler.fragmentation import GPU_PRODUCT_LABEL, TaskShape

NAMESPACE = "trace"
#: Told (steps done, steps in all) as a replay goes: the caller's progress display.
Progress = Callable[[int, int], None]
#: Pods a trace node takes when the trace does not say (the kubelet's default).
DEFAULT_MAX_PODS = 110

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
POD_OPTIONAL = ("gpu_spec", "qos", "pod_phase", "creation_time", "deletion_time",
                "scheduled_time")
NODE_KEYS = frozenset({"kind", "name", "cpuMillis", "memoryMiB", "gpus", "gpuProduct",
                       "maxPods"})
POD_KEYS = frozenset({"kind", "name", "cpuMillis", "memoryMiB", "gpus", "gpuMilli",
                      "gpuProducts", "queue", "qos", "createdAt", "deletedAt"})


class TraceError(ValueError):
    """A trace file that cannot be read; the message names file, line and field."""


@dataclass(frozen=True, slots=True)
class TraceNode:
    name: str
    cpu_millis: int
    memory_mib: int
    gpus: int
    model: str | None  # GPU model (``nvidia.com/gpu.product``); None without GPUs
    max_pods: int = DEFAULT_MAX_PODS

    def to_node(self) -> Node:
        labels = {GPU_PRODUCT_LABEL: self.model} if self.model else {}
        return Node(
            name=self.name, gpus=self.gpus, cpu_millis=self.cpu_millis,
            memory_bytes=self.memory_mib * MIB, max_pods=self.max_pods, labels=labels,
        )


@dataclass(frozen=True, slots=True)
class TracePod:
    name: str
    cpu_millis: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int  # on each of its GPUs; 1000 for whole GPUs
    gpu_spec: tuple[str, ...] = ()  # GPU models it may run on; empty: any
    qos: str = ""
    queue: str = ""  # gpushare format only; openb pods get theirs from a mapping
    created: float = 0.0
    deleted: float | None = None

    @property
    def gpu_total(self) -> int:
        """Milli-GPUs it asks for in all."""
        return self.num_gpu * self.gpu_milli

    def gpu_request(self) -> GpuRequest:
        if self.num_gpu == 0 or self.gpu_milli == 0:
            return GpuRequest()
        if self.gpu_milli >= MILLI:
            return GpuRequest(whole=self.num_gpu)
        return GpuRequest(portion=self.gpu_milli, devices=self.num_gpu)

    def to_pod(self, name: str | None = None) -> Pod:
        pod_name = name or self.name
        selector: dict[str, str] = {}
        affinity: tuple[tuple[str, tuple[str, ...]], ...] = ()
        if len(self.gpu_spec) == 1:
            selector = {GPU_PRODUCT_LABEL: self.gpu_spec[0]}
        elif self.gpu_spec:
            affinity = ((GPU_PRODUCT_LABEL, self.gpu_spec),)
        return Pod(
            name=pod_name, namespace=NAMESPACE, job=f"{NAMESPACE}/{pod_name}", index=0,
            gpu=self.gpu_request(), cpu_millis=self.cpu_millis,
            memory_bytes=self.memory_mib * MIB, node_selector=selector,
            node_affinity=affinity,
        )

    def to_job(self, queue: str, name: str | None = None, created_at: float = 0.0) -> Job:
        pod_name = name or self.name
        return Job(name=pod_name, namespace=NAMESPACE, queue=queue, created_at=created_at,
                   pods=[f"{NAMESPACE}/{pod_name}"])

    def shape(self) -> TaskShape:
        req = self.gpu_request()
        gpus = req.whole or (req.devices if req.is_shared else 0)
        milli = MILLI if req.whole else (self.gpu_milli if req.is_shared else 0)
        products = frozenset(self.gpu_spec) if self.gpu_spec else None
        return TaskShape(self.cpu_millis, gpus, milli, self.memory_mib * MIB, products)


# ------------------------------------------------------------------- reading
def read_nodes(path: str | Path) -> list[TraceNode]:
    """Nodes of an openb node CSV or a gpushare trace file."""
    path = Path(path)
    if _is_jsonl(path):
        return [n for n in _read_jsonl(path) if isinstance(n, TraceNode)]
    nodes = []
    seen: set[str] = set()
    for line, row in _csv_rows(path, NODE_COLUMNS, ()):
        where = f"{path}:{line}"
        name = _name(row["sn"], where, "sn")
        gpus = _int(row["gpu"], where, "gpu")
        model = row["model"].strip() or None
        if gpus and model is None:
            raise TraceError(f"{where}: model: a node with GPUs needs its GPU model")
        node = TraceNode(name, _int(row["cpu_milli"], where, "cpu_milli"),
                         _int(row["memory_mib"], where, "memory_mib"), gpus,
                         model if gpus else None)
        _unique(name, seen, where, "sn")
        nodes.append(node)
    return nodes


def read_pods(path: str | Path) -> list[TracePod]:
    """Pods of an openb pod CSV or a gpushare trace file, in file order."""
    path = Path(path)
    if _is_jsonl(path):
        return [p for p in _read_jsonl(path) if isinstance(p, TracePod)]
    pods = []
    seen: set[str] = set()
    for line, row in _csv_rows(path, POD_COLUMNS, POD_OPTIONAL):
        where = f"{path}:{line}"
        name = _name(row["name"], where, "name")
        num_gpu = _int(row["num_gpu"], where, "num_gpu")
        gpu_milli = _int(row["gpu_milli"], where, "gpu_milli")
        _check_gpu(num_gpu, gpu_milli, where, "num_gpu", "gpu_milli")
        spec = tuple(sorted({s.strip() for s in (row.get("gpu_spec") or "").split("|")
                             if s.strip()}))
        created = _float(row.get("creation_time") or "0", where, "creation_time")
        deleted_raw = (row.get("deletion_time") or "").strip()
        deleted = _float(deleted_raw, where, "deletion_time") if deleted_raw else None
        if deleted is not None and deleted < created:
            raise TraceError(f"{where}: deletion_time: before creation_time")
        _unique(name, seen, where, "name")
        pods.append(TracePod(
            name, _int(row["cpu_milli"], where, "cpu_milli"),
            _int(row["memory_mib"], where, "memory_mib"), num_gpu, gpu_milli, spec,
            (row.get("qos") or "").strip(), "", created, deleted,
        ))
    return pods


def _is_jsonl(path: Path) -> bool:
    return path.suffix in (".jsonl", ".json", ".ndjson")


def _csv_rows(path: Path, required: tuple[str, ...], optional: tuple[str, ...]):
    try:
        handle = path.open(newline="")
    except OSError as err:
        raise TraceError(f"{path}: {err.strerror or err}") from None
    with handle:
        reader = csv.reader(handle)
        try:
            header = [h.strip() for h in next(reader)]
        except StopIteration:
            raise TraceError(f"{path}:1: empty file, expected a header row") from None
        except csv.Error as err:
            raise TraceError(f"{path}:1: {err}") from None
        missing = [c for c in required if c not in header]
        if missing:
            raise TraceError(f"{path}:1: header lacks column(s) {', '.join(missing)}")
        known = set(required) | set(optional)
        columns = [(i, h) for i, h in enumerate(header) if h in known]
        line = 1
        try:
            for cells in reader:
                line = reader.line_num
                if not cells or all(not c.strip() for c in cells):
                    continue
                if len(cells) != len(header):
                    raise TraceError(
                        f"{path}:{line}: expected {len(header)} fields, got {len(cells)}")
                yield line, {h: cells[i] for i, h in columns}
        except csv.Error as err:
            raise TraceError(f"{path}:{line + 1}: {err}") from None


def _read_jsonl(path: Path) -> list[TraceNode | TracePod]:
    try:
        text = path.read_bytes()
    except OSError as err:
        raise TraceError(f"{path}: {err.strerror or err}") from None
    out: list[TraceNode | TracePod] = []
    nodes: set[str] = set()
    pods: set[str] = set()
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip() or raw.lstrip().startswith(b"#"):
            continue
        where = f"{path}:{line}"
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as err:
            raise TraceError(f"{where}: not JSON: {err}") from None
        if not isinstance(obj, dict):
            raise TraceError(f"{where}: expected an object")
        kind = obj.get("kind")
        if kind == "Node":
            out.append(_json_node(obj, where, nodes))
        elif kind == "Pod":
            out.append(_json_pod(obj, where, pods))
        else:
            raise TraceError(f"{where}: kind: expected Node or Pod, got {kind!r}")
    return out


def _json_node(obj: dict[str, Any], where: str, seen: set[str]) -> TraceNode:
    _known(obj, NODE_KEYS, where)
    name = _name(obj.get("name"), where, "name")
    gpus = _jint(obj.get("gpus", 0), where, "gpus")
    model = obj.get("gpuProduct")
    if model is not None and (not isinstance(model, str) or not model):
        raise TraceError(f"{where}: gpuProduct: expected a non-empty string")
    if gpus and not model:
        raise TraceError(f"{where}: gpuProduct: a node with GPUs needs its GPU model")
    _unique(name, seen, where, "name")
    return TraceNode(
        name, _jint(obj.get("cpuMillis"), where, "cpuMillis"),
        _jint(obj.get("memoryMiB"), where, "memoryMiB"), gpus, model if gpus else None,
        _jint(obj.get("maxPods", DEFAULT_MAX_PODS), where, "maxPods"),
    )


def _json_pod(obj: dict[str, Any], where: str, seen: set[str]) -> TracePod:
    _known(obj, POD_KEYS, where)
    name = _name(obj.get("name"), where, "name")
    gpus = _jint(obj.get("gpus", 0), where, "gpus")
    milli = _jint(obj.get("gpuMilli", MILLI if gpus else 0), where, "gpuMilli")
    _check_gpu(gpus, milli, where, "gpus", "gpuMilli")
    products = obj.get("gpuProducts", [])
    if not isinstance(products, list) or not all(isinstance(p, str) and p for p in products):
        raise TraceError(f"{where}: gpuProducts: expected a list of GPU model names")
    created = _jnum(obj.get("createdAt", 0), where, "createdAt")
    deleted = obj.get("deletedAt")
    if deleted is not None:
        deleted = _jnum(deleted, where, "deletedAt")
        if deleted < created:
            raise TraceError(f"{where}: deletedAt: before createdAt")
    for key in ("queue", "qos"):
        if not isinstance(obj.get(key, ""), str):
            raise TraceError(f"{where}: {key}: expected a string")
    _unique(name, seen, where, "name")
    return TracePod(
        name, _jint(obj.get("cpuMillis", 0), where, "cpuMillis"),
        _jint(obj.get("memoryMiB", 0), where, "memoryMiB"), gpus, milli,
        tuple(sorted(set(products))), obj.get("qos", ""), obj.get("queue", ""),
        created, deleted,
    )


# ------------------------------------------------------------------ checking
def _known(obj: dict[str, Any], keys: frozenset[str], where: str) -> None:
    for key in obj:
        if key not in keys:
            raise TraceError(f"{where}: {key}: unknown key")


def _name(value: Any, where: str, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise TraceError(f"{where}: {field}: expected a non-empty name")
    return value.strip()


def _unique(name: str, seen: set[str], where: str, field: str) -> None:
    if name in seen:
        raise TraceError(f"{where}: {field}: {name!r} appears twice")
    seen.add(name)


def _int(text: str, where: str, field: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise TraceError(f"{where}: {field}: expected a whole number, got {text!r}") from None
    if value < 0:
        raise TraceError(f"{where}: {field}: must not be negative, got {value}")
    return value


def _float(text: str, where: str, field: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise TraceError(f"{where}: {field}: expected a number, got {text!r}") from None
    if value != value or value < 0 or value == float("inf"):
        raise TraceError(f"{where}: {field}: expected a finite number >= 0, got {text!r}")
    return value


def _jint(value: Any, where: str, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TraceError(f"{where}: {field}: expected a whole number >= 0, got {value!r}")
    return value


def _jnum(value: Any, where: str, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise TraceError(f"{where}: {field}: expected a number >= 0, got {value!r}")
    return float(value)


def _check_gpu(num: int, milli: int, where: str, num_field: str, milli_field: str) -> None:
    if milli > MILLI:
        raise TraceError(f"{where}: {milli_field}: at most {MILLI} per GPU, got {milli}")
    if num and not milli:
        raise TraceError(f"{where}: {milli_field}: {num_field} is {num} but no milli-GPU asked")
    if milli and not num:
        raise TraceError(f"{where}: {num_field}: {milli_field} is {milli} but no GPU asked")
