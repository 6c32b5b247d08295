"""The agent's storage pass: measure each running pod's local storage, evict the pods over
their limits, and watch the data directory's file system for disk pressure.

The pass acts locally first: the pods it evicts are killed by their supervisors at once
(`Evictor.evict`), and the node's pressure state is kept here; the API writes that
publish them (pod status, Event, Node condition and taint) may fail or lag without
holding anything back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gpushare.agent.pods.storage import (
    EVICTED,
    DiskState,
    PodUsage,
    StorageSpecError,
    check_pod,
    disk_state,
    pressure_message,
    pressure_victims,
    storage_limits,
    usage_bytes,
)
from gpushare.agent.pods.volumes import mounts_under

log = logging.getLogger("gpushare.agent")


@dataclass(frozen=True, slots=True)
class TrackedPod:
    """A pod whose processes run now: its key (namespace/name), object and directory,
    and where its disk-backed emptyDir volumes keep their files (by volume name)."""

    key: str
    pod: Mapping[str, Any]
    directory: Path
    empty_dirs: Mapping[str, Path]


class Evictor(Protocol):
    def evict(self, key: str, message: str) -> None:
        """Kill the pod's processes now and fail it with reason Evicted and `message`."""

    def pressure(self, state: DiskState) -> None:
        """The node's disk state after a pass (publish DiskPressure and its taint)."""


@dataclass(slots=True)
class StorageEnforcer:
    data_dir: Path
    min_free_fraction: float
    pods: Callable[[], list[TrackedPod]]
    evictor: Evictor
    last_state: DiskState | None = None

    def once(self) -> list[tuple[str, str]]:
        """One pass; the (pod, message) evicted."""
        evicted: list[tuple[str, str]] = []
        usage: dict[str, int] = {}
        for tracked in self.pods():
            try:
                limits = storage_limits(tracked.pod)
            except StorageSpecError as exc:  # checked at start: only a changed spec gets here
                log.warning("pod %s: %s", tracked.key, exc)
                continue
            # a mounted volume is counted as its own (an emptyDir) or not at all (hostPath)
            total = usage_bytes(tracked.directory, mounts_under(tracked.directory))
            empties = {name: usage_bytes(path) for name, path in tracked.empty_dirs.items()}
            message = check_pod(limits, PodUsage(total, empties))
            if message is not None:
                evicted.append((tracked.key, message))
            else:
                usage[tracked.key] = total
        state = disk_state(self.data_dir, self.min_free_fraction)
        self.last_state = state
        for key in pressure_victims(usage, state):
            evicted.append((key, pressure_message(state)))
        for key, message in evicted:
            log.warning("evicting pod %s: %s", key, message)
            self.evictor.evict(key, message)
        self.evictor.pressure(state)
        return evicted


__all__ = ["EVICTED", "StorageEnforcer", "TrackedPod"]
