"""What a pod asks of GPUs and what a bound pod holds: the one reader of a pod's GPU
request (KAI Scheduler's ``gpu-fraction``, ``gpu-memory``, ``gpu-fraction-num-devices``
annotations, else the ``nvidia.com/gpu`` limits) and of the binding the scheduler loop
wrote on it (``gpushare.io/gpu-indices``, ``gpushare.io/gpu-portion``; the codec of each
value is `gpushare.api.contracts`).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from gpushare.api.contracts import (
    GPU_DEVICES_ANNOTATION,
    GPU_FRACTION_ANNOTATION,
    GPU_INDICES_ANNOTATION,
    GPU_MEMORY_ANNOTATION,
    GPU_PORTION_ANNOTATION,
    GPU_RESOURCE,
    BindingError,
    parse_indices,
    parse_portion_milli,
)
from gpushare.api.objects import Meta, Obj, metadata
from gpushare.api.quantity import QuantityError, to_int
from gpushare.model.pod import GpuRequest
from gpushare.model.quantities import to_fraction

T = TypeVar("T")


class GpuRequestError(ValueError):
    """A GPU request annotation that cannot be read; the message names the pod and the
    annotation."""


def _annotation_value(annotations: Obj, key: str, pod_name: str, parse: Callable[[Any], T],
                      valid: Callable[[T], bool], expected: str) -> T:
    """One GPU request annotation, parsed and checked, or a GpuRequestError naming it."""
    try:
        value: T | None = parse(annotations[key])
    except ValueError:
        value = None
    if value is None or not valid(value):
        raise GpuRequestError(f"pod {pod_name}: annotation {key} must be {expected}")
    return value


def _whole_gpus(value: Any) -> int:
    try:
        return to_int(value)
    except (QuantityError, ValueError):
        return 0


def gpu_request(pod: Obj) -> GpuRequest:
    """What the pod asks of GPUs, from its annotations and container limits."""
    annotations = Meta.of(pod).annotations
    name = metadata(pod).get("name", "")
    devices = 1
    if annotations.get(GPU_DEVICES_ANNOTATION):
        devices = _annotation_value(annotations, GPU_DEVICES_ANNOTATION, name, int,
                                    lambda n: n >= 1, "a positive integer")
    if annotations.get(GPU_FRACTION_ANNOTATION):
        fraction = _annotation_value(annotations, GPU_FRACTION_ANNOTATION, name, to_fraction,
                                     lambda f: 0 < f < 1, "a number in (0, 1)")
        return GpuRequest(portion=max(round(fraction * 1000), 1), devices=devices)
    if annotations.get(GPU_MEMORY_ANNOTATION):
        mib = _annotation_value(annotations, GPU_MEMORY_ANNOTATION, name, int,
                                lambda n: n >= 1, "a positive integer (MiB)")
        return GpuRequest(memory_mib=mib, devices=devices)
    whole = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        amount = (resources.get("limits") or {}).get(GPU_RESOURCE) or (
            resources.get("requests") or {}
        ).get(GPU_RESOURCE)
        if amount is not None:
            whole += _whole_gpus(amount)
    return GpuRequest(whole=whole)


def bound_gpus(pod: Obj) -> tuple[tuple[int, ...], int]:
    """The GPU indices and milli-portion written on a bound pod; what cannot be read is
    () and 0."""
    annotations = Meta.of(pod).annotations
    try:
        indices = parse_indices(str(annotations.get(GPU_INDICES_ANNOTATION, "")))
    except BindingError:
        indices = ()
    portion_text = str(annotations.get(GPU_PORTION_ANNOTATION, ""))
    try:
        portion = parse_portion_milli(portion_text) if portion_text else 0
    except BindingError:
        portion = 0
    return indices, portion
