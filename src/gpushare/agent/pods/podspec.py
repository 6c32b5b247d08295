"""From a pod object (as the API returns it, a dict) to the processes to start.

Pure apart from the `ValueSource` it is given for configMap/secret look-ups. Images are
ignored: a container runs its `command` + `args` (or `args` alone) on this machine.
"""

from __future__ import annotations

import base64
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import PurePosixPath
from typing import Any, Protocol

from gpushare.agent.pods.envexpand import expand
from gpushare.api import quantity
from gpushare.api.objects import Meta
from gpushare.api.quantity import QuantityError


class PodSpecError(ValueError):
    """A container cannot be run as written; the message names the field."""


class ValueSource(Protocol):
    """Where configMap and secret values come from (the API, in the agent)."""

    def config_map(self, namespace: str, name: str) -> Mapping[str, str] | None: ...

    def secret(self, namespace: str, name: str) -> Mapping[str, str] | None: ...


@dataclass(frozen=True, slots=True)
class ContainerPlan:
    name: str
    argv: tuple[str, ...]
    env: dict[str, str] = field(hash=False)
    working_dir: str  # relative to the pod directory
    init: bool = False


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = Meta.of(pod)
    return f"{meta.namespace or 'default'}/{meta.name}"


def plan_container(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    path: str,
    runtime_env: Mapping[str, str],
    gpu_env: Mapping[str, str],
    values: ValueSource,
    init: bool = False,
    path_prefixes: Mapping[str, str] | None = None,
) -> ContainerPlan:
    """Resolve one container. `path` is its field path, e.g. `spec.containers[0]`.

    `runtime_env` is what every container gets first (PATH, HOSTNAME...); `gpu_env` comes last
    and wins, so a pod cannot widen its own GPU limits through `env`. `path_prefixes` are put
    in front of path-like variables (the PyTorch hook's directory on PYTHONPATH).
    """
    name = str(container.get("name") or "")
    if not name:
        raise PodSpecError(f"{path}.name: required")
    env: dict[str, str] = dict(runtime_env)
    env.update(gpu_env)
    namespace = Meta.of(pod).namespace or "default"
    for j, source in enumerate(container.get("envFrom") or []):
        env.update(_env_from(source, f"{path}.envFrom[{j}]", namespace, values))
    for j, var in enumerate(container.get("env") or []):
        var_path = f"{path}.env[{j}]"
        var_name = var.get("name")
        if not var_name:
            raise PodSpecError(f"{var_path}.name: required")
        if "valueFrom" in var and var["valueFrom"] is not None:
            resolved = _value_from(pod, container, var["valueFrom"], var_path, values)
            if resolved is None:  # optional and missing
                continue
            env[var_name] = resolved
        else:
            env[var_name] = expand(str(var.get("value") or ""), env)
    env.update(gpu_env)
    for var, prefix in (path_prefixes or {}).items():
        env[var] = prefix + (os.pathsep + env[var] if env.get(var) else "")

    command = [str(c) for c in container.get("command") or []]
    args = [str(a) for a in container.get("args") or []]
    if not command and not args:
        raise PodSpecError(
            f"{path}.command: required (images are not run here: give the command to start)"
        )
    argv = tuple(expand(part, env) for part in command + args)
    working_dir = _working_dir(container.get("workingDir"), f"{path}.workingDir")
    return ContainerPlan(name=name, argv=argv, env=env, working_dir=working_dir, init=init)


def _working_dir(raw: object, path: str) -> str:
    """The pod directory plays the container's root: `/app` and `app` both mean `<pod>/app`."""
    if not raw:
        return "."
    parts = [p for p in PurePosixPath(str(raw)).parts if p not in ("/", ".")]
    if ".." in parts:
        raise PodSpecError(f"{path}: {raw!r} must not leave the pod directory ('..')")
    return str(PurePosixPath(*parts)) if parts else "."


def _env_from(
    source: Mapping[str, Any], path: str, namespace: str, values: ValueSource
) -> dict[str, str]:
    prefix = str(source.get("prefix") or "")
    if source.get("configMapRef"):
        ref, kind = source["configMapRef"], "configMapRef"
        data = values.config_map(namespace, ref.get("name", ""))
    elif source.get("secretRef"):
        ref, kind = source["secretRef"], "secretRef"
        data = values.secret(namespace, ref.get("name", ""))
    else:
        raise PodSpecError(f"{path}: needs configMapRef or secretRef")
    if data is None:
        if ref.get("optional"):
            return {}
        raise PodSpecError(f"{path}.{kind}: {kind[:-3]} {ref.get('name')!r} not found")
    return {prefix + k: v for k, v in data.items()}


_LABEL_REF = re.compile(r"^metadata\.(labels|annotations)\['([^']+)'\]$")


def _value_from(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    value_from: Mapping[str, Any],
    path: str,
    values: ValueSource,
) -> str | None:
    meta = Meta.of(pod)
    if value_from.get("fieldRef"):
        field_path = str(value_from["fieldRef"].get("fieldPath") or "")
        return field_value(pod, field_path, f"{path}.valueFrom.fieldRef.fieldPath")
    for kind, getter in (
        ("configMapKeyRef", values.config_map),
        ("secretKeyRef", values.secret),
    ):
        ref = value_from.get(kind)
        if not ref:
            continue
        data = getter(meta.namespace or "default", ref.get("name", ""))
        key = ref.get("key", "")
        if data is None or key not in data:
            if ref.get("optional"):
                return None
            what = "configMap" if kind == "configMapKeyRef" else "secret"
            missing = f"{what} {ref.get('name')!r}" if data is None else f"key {key!r}"
            raise PodSpecError(f"{path}.valueFrom.{kind}: {missing} not found")
        return data[key]
    if value_from.get("resourceFieldRef"):
        return _resource_value(container, value_from["resourceFieldRef"], path)
    raise PodSpecError(
        f"{path}.valueFrom: needs fieldRef, configMapKeyRef, secretKeyRef or resourceFieldRef"
    )


def field_value(pod: Mapping[str, Any], field_path: str, path: str) -> str:
    meta = Meta.of(pod)
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    simple: dict[str, object] = {
        "metadata.name": meta.name,
        "metadata.namespace": meta.namespace or "default",
        "metadata.uid": meta.uid,
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.hostIP": status.get("hostIP"),
        "status.podIP": status.get("podIP"),
        "status.hostIPs": ",".join(i.get("ip", "") for i in status.get("hostIPs") or []),
        "status.podIPs": ",".join(i.get("ip", "") for i in status.get("podIPs") or []),
    }
    if field_path in simple:
        return "" if simple[field_path] is None else str(simple[field_path])
    match = _LABEL_REF.match(field_path)
    if match:
        source = meta.labels if match.group(1) == "labels" else meta.annotations
        return str(source.get(match.group(2), ""))
    if field_path in ("metadata.labels", "metadata.annotations"):
        items = meta.labels if field_path == "metadata.labels" else meta.annotations
        return "\n".join(f'{k}="{v}"' for k, v in sorted(items.items()))
    raise PodSpecError(f"{path}: unsupported field {field_path!r}")


def _quantity(text: str, path: str) -> Decimal:
    """A Kubernetes quantity; bad input is a `PodSpecError` naming the field at `path`."""
    try:
        return quantity.parse_quantity(str(text))
    except QuantityError:
        raise PodSpecError(f"{path}: {text!r} is not a quantity") from None


def _resource_value(container: Mapping[str, Any], ref: Mapping[str, Any], path: str) -> str:
    resource = str(ref.get("resource") or "")
    kind, _, name = resource.partition(".")
    if kind not in ("limits", "requests") or not name:
        raise PodSpecError(f"{path}.valueFrom.resourceFieldRef.resource: {resource!r} unsupported")
    resources = container.get("resources") or {}
    raw = (resources.get(kind) or {}).get(name)
    if raw is None and kind == "requests":
        raw = (resources.get("limits") or {}).get(name)
    if raw is None:
        return "0"
    divisor = _quantity(str(ref.get("divisor") or "1"), f"{path}.valueFrom.divisor")
    if divisor <= 0:
        raise PodSpecError(f"{path}.valueFrom.divisor: {ref.get('divisor')!r} must be positive")
    value = _quantity(str(raw), f"{path}.valueFrom.resourceFieldRef")
    return str(math.ceil(value / divisor))


def decode_secret(data: Mapping[str, str] | None) -> dict[str, str] | None:
    """Secret `data` is base64; `stringData` is folded in by the API server on write."""
    if data is None:
        return None
    return {k: base64.b64decode(v).decode(errors="replace") for k, v in data.items()}
