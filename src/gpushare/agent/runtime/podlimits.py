"""One pod's cgroups as its supervisor uses them: made before the first container starts,
one child per container entered by each run before its command, the OOM counter read when
a run ends, all removed (after killing whatever is left in them) when the pod is forgotten.

The pod's cgroup set is recorded in ``<pod dir>/.gpushare/cgroup.json`` with the OOM
counter each container's run started from, so a restarted agent finds the same cgroups
(even from another cgroup of its own) and still tells an ``OOMKilled`` run from an
``Error``; `remove_recorded` cleans the cgroups of a pod directory whose pod is gone.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpushare.agent.runtime.cgroups import (
    CgroupError,
    Cgroups,
    CgroupSet,
    Limits,
    LimitsError,
    pod_limits,
    remove,
)
from gpushare.api.objects import Meta

log = logging.getLogger("gpushare.agent")

RECORD = "cgroup.json"
META_DIR = ".gpushare"  # the pod directory's metadata (as logstore names it)


class PodLimits:
    """The cgroups of one pod. Construction checks the spec (`LimitsError` naming the
    field); `prepare` makes the pod's cgroup; `enter` each container run's."""

    def __init__(self, cgroups: Cgroups, pod: Mapping[str, Any], pids_limit: int | None,
                 directory: Path) -> None:
        meta = Meta.of(pod)
        self.uid = meta.uid
        self.pod_limits, self.containers = pod_limits(pod, pids_limit)
        self._cgroups = cgroups
        self._record = directory / META_DIR / RECORD
        self._lock = threading.Lock()
        self._baseline: dict[str, int] = {}
        self.cgroup = cgroups.pod(self.uid)
        recorded = self._load()
        if recorded is not None:
            self.cgroup, self._baseline = recorded

    def _load(self) -> tuple[CgroupSet, dict[str, int]] | None:
        try:
            raw = json.loads(self._record.read_text())
            if raw.get("uid") != self.uid:
                return None
            return (CgroupSet.from_json(json.dumps(raw["cgroup"])),
                    {str(k): int(v) for k, v in (raw.get("baseline") or {}).items()})
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _save(self) -> None:
        self._record.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._record.with_suffix(".tmp")
        tmp.write_text(json.dumps({"uid": self.uid, "cgroup": json.loads(self.cgroup.to_json()),
                                   "baseline": self._baseline}))
        tmp.replace(self._record)

    def prepare(self) -> None:
        """Make the pod's cgroup with its limits (again after a restart: same values)."""
        with self._lock:
            self._cgroups.make(self.cgroup, self.pod_limits)
            self._save()

    def limits_of(self, container: str) -> Limits:
        return self.containers.get(container, Limits())

    def enter(self, container: str) -> tuple[str, ...]:
        """Make the container's cgroup and note its OOM counter; the ``cgroup.procs`` files
        the run's wrapper joins before it starts the command."""
        with self._lock:
            if not self.cgroup.exists():
                self._cgroups.make(self.cgroup, self.pod_limits)
            child = self._cgroups.make(self.cgroup.child(container), self.limits_of(container))
            self._baseline[container] = child.oom_kills()
            self._save()
            return child.procs_files()

    def oom_killed(self, container: str) -> bool:
        """Whether the kernel's OOM killer ended a process of the container's current run."""
        child = self.cgroup.child(container)
        return child.oom_kills() > self._baseline.get(container, 0)

    def container_cgroup(self, container: str) -> CgroupSet:
        return self.cgroup.child(container)

    def remove(self) -> bool:
        """Kill what is left in the pod's cgroups and remove them; whether they are gone."""
        with self._lock:
            gone = remove(self.cgroup)
        if not gone:
            log.warning("cgroup of pod %s is still there after cleaning", self.uid)
        return gone


def remove_recorded(directory: Path) -> bool:
    """Remove the cgroups recorded for a pod directory (its pod is gone); True when there
    were some and they are gone."""
    try:
        raw = json.loads((directory / META_DIR / RECORD).read_text())
        cgroup = CgroupSet.from_json(json.dumps(raw["cgroup"]))
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return remove(cgroup)


def describe_limits(limits: Limits) -> str:
    parts = []
    if limits.memory_bytes is not None:
        parts.append(f"memory {limits.memory_bytes} bytes")
    if limits.cpu_quota_us is not None:
        parts.append(f"cpu quota {limits.cpu_quota_us}us per 100ms")
    if limits.pids is not None:
        parts.append(f"pids {limits.pids}")
    parts.append(f"cpu shares {limits.cpu_shares}")
    return ", ".join(parts)


__all__ = ["CgroupError", "LimitsError", "PodLimits", "describe_limits", "remove_recorded"]
