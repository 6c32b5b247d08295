"""Local storage of pods: what each uses, whether it passes its limits, and node disk pressure.

As a kubelet measures pods' local ephemeral storage (the container's writable files, its
logs and its disk-backed ``emptyDir`` volumes) every few seconds:

* a pod whose usage passes the sum of its containers' ``ephemeral-storage`` limits, or an
  ``emptyDir`` past its ``sizeLimit``, is evicted: phase ``Failed``, reason ``Evicted`` and
  the kubelet's message (`check_pod`);
* when the free space of the file system holding the agent's data directory falls under
  the threshold (``nodefs.available``, 10 % by default) the Node gets ``DiskPressure`` and
  the ``node.kubernetes.io/disk-pressure:NoSchedule`` taint, and the pods using the most
  are evicted first, one per pass, until it is over (`pressure_victims`).

Measuring and deciding are here; the agent stops the processes itself, before (and
whatever becomes of) the API writes that publish it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from gpushare.api import quantity
from gpushare.api.quantity import QuantityError
from gpushare.api.timefmt import rfc3339

EVICTED = "Evicted"
DISK_PRESSURE = "DiskPressure"
DISK_PRESSURE_TAINT = "node.kubernetes.io/disk-pressure"
DEFAULT_MIN_FREE_FRACTION = 0.10


class StorageSpecError(ValueError):
    """A storage quantity cannot be read; the message names the field."""


def usage_bytes(path: Path, exclude: Iterable[str] = ()) -> int:
    """Bytes the files under `path` take on disk (blocks; hard links once; symbolic links
    not followed; other file systems and the directories in `exclude`, such as mount
    points, not entered). 0 when it does not exist."""
    skip = set(exclude)
    try:
        device = os.lstat(path).st_dev
    except OSError:
        return 0
    seen: set[tuple[int, int]] = set()
    total = 0
    stack = [str(path)]
    while stack:
        current = stack.pop()
        try:
            entries = list(os.scandir(current))
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if info.st_dev != device:
                continue
            key = (info.st_dev, info.st_ino)
            if key in seen:
                continue
            seen.add(key)
            total += info.st_blocks * 512
            if entry.is_dir(follow_symlinks=False) and entry.path not in skip:
                stack.append(entry.path)
    return total


def _quantity(raw: object, path: str) -> Decimal:
    try:
        return quantity.parse_quantity(str(raw))
    except QuantityError:
        raise StorageSpecError(f"{path}: {raw!r} is not a quantity") from None


@dataclass(frozen=True, slots=True)
class StorageLimits:
    """The pod's ephemeral-storage limit (None: none) and its emptyDir size limits, with
    the quantities as written (for the messages)."""

    pod_bytes: int | None = None
    pod_text: str = ""
    empty_dirs: tuple[tuple[str, int, str], ...] = ()  # (volume, bytes, as written)


def storage_limits(pod: Mapping[str, Any]) -> StorageLimits:
    """From the spec: the sum of the containers' ``limits.ephemeral-storage`` (the ones
    that set it, as the kubelet sums them) and each disk ``emptyDir``'s ``sizeLimit``."""
    spec = pod.get("spec") or {}
    total: Decimal | None = None
    texts: list[str] = []
    for i, container in enumerate(spec.get("containers") or []):
        raw = ((container.get("resources") or {}).get("limits") or {}).get("ephemeral-storage")
        if raw is None:
            continue
        value = _quantity(raw, f"spec.containers[{i}].resources.limits.ephemeral-storage")
        total = value if total is None else total + value
        texts.append(str(raw))
    empty: list[tuple[str, int, str]] = []
    for i, volume in enumerate(spec.get("volumes") or []):
        source = volume.get("emptyDir")
        if not isinstance(source, Mapping) or source.get("sizeLimit") in (None, ""):
            continue
        raw = source["sizeLimit"]
        value = _quantity(raw, f"spec.volumes[{i}].emptyDir.sizeLimit")
        empty.append((str(volume.get("name") or ""), int(value), str(raw)))
    text = texts[0] if len(texts) == 1 else "" if total is None else quantity.format_bytes(
        int(total))
    return StorageLimits(None if total is None else int(total), text, tuple(empty))


@dataclass(frozen=True, slots=True)
class PodUsage:
    """What one pod takes: all of its local storage, and each emptyDir's."""

    total: int
    empty_dirs: Mapping[str, int]


def check_pod(limits: StorageLimits, usage: PodUsage) -> str | None:
    """The kubelet's eviction message when the pod passes a limit, else None."""
    for volume, limit, text in limits.empty_dirs:
        if usage.empty_dirs.get(volume, 0) > limit:
            return f'Usage of EmptyDir volume "{volume}" exceeds the limit "{text}". '
    if limits.pod_bytes is not None and usage.total > limits.pod_bytes:
        return ("Pod ephemeral local storage usage exceeds the total limit of containers "
                f"{limits.pod_text}. ")
    return None


@dataclass(frozen=True, slots=True)
class DiskState:
    free: int
    total: int
    threshold: int  # pressure below this many free bytes

    @property
    def pressure(self) -> bool:
        return self.free < self.threshold


def disk_state(path: Path, min_free_fraction: float = DEFAULT_MIN_FREE_FRACTION) -> DiskState:
    """The file system holding `path`: free bytes (for unprivileged users, as ``df``'s
    available) and the pressure threshold."""
    stats = os.statvfs(path)
    total = stats.f_blocks * stats.f_frsize
    return DiskState(stats.f_bavail * stats.f_frsize, total, int(total * min_free_fraction))


def pressure_message(state: DiskState) -> str:
    """The kubelet's message for a pod evicted for node disk pressure."""
    return ("The node was low on resource: ephemeral-storage. Threshold quantity: "
            f"{state.threshold}, available: {state.free}. ")


def pressure_victims(usage: Mapping[str, int], state: DiskState) -> list[str]:
    """Under pressure, the pod to evict this pass: the one using the most (by key)."""
    if not state.pressure or not usage:
        return []
    return [max(usage, key=lambda key: (usage[key], key))]


def pressure_condition(on: bool, now: float, since: float) -> dict[str, Any]:
    """The Node condition ``DiskPressure`` as a kubelet words it."""
    return {
        "type": DISK_PRESSURE,
        "status": "True" if on else "False",
        "reason": "KubeletHasDiskPressure" if on else "KubeletHasNoDiskPressure",
        "message": "kubelet has disk pressure" if on else "kubelet has no disk pressure",
        "lastHeartbeatTime": rfc3339(now),
        "lastTransitionTime": rfc3339(since),
    }


def with_taint(taints: Iterable[Mapping[str, Any]], on: bool) -> list[dict[str, Any]] | None:
    """The Node's taints with the disk-pressure taint added or removed; None if unchanged."""
    current = [dict(t) for t in taints]
    has = any(t.get("key") == DISK_PRESSURE_TAINT for t in current)
    if has == on:
        return None
    if on:
        return [*current, {"key": DISK_PRESSURE_TAINT, "effect": "NoSchedule"}]
    return [t for t in current if t.get("key") != DISK_PRESSURE_TAINT]
