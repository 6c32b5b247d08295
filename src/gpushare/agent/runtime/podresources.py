"""What the node gives each pod besides its processes, as one piece the agent drives: cgroup
limits (`nodelimits`), volumes (`pods.volumes`), local-storage eviction and disk pressure
(`pods.eviction`), and the Node conditions that say what is in force.

The agent asks it to admit a pod (`admit`: its limits, or a refusal with the reason and
message the pod fails with), to make a pod's volumes (`volumes_for`), to run the storage
pass and the volume refresh on their periods, and to clean up after a pod (`release`).
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpushare.agent.pods.eviction import StorageEnforcer, TrackedPod
from gpushare.agent.pods.podspec import ValueSource
from gpushare.agent.pods.storage import (
    DEFAULT_MIN_FREE_FRACTION,
    EVICTED,
    DiskState,
    StorageSpecError,
    pressure_condition,
    storage_limits,
    with_taint,
)
from gpushare.agent.pods.volumes import Owner, PodVolumes, TokenSource, unmount_all
from gpushare.agent.runtime.cgroups import DEFAULT_POD_PIDS, LimitsError
from gpushare.agent.runtime.nodelimits import REFUSED, LimitsRefused, NodeLimits
from gpushare.agent.runtime.podlimits import PodLimits, remove_recorded
from gpushare.agent.runtime.probes import ProbeSpecError, probes_of
from gpushare.agent.runtime.sandbox import NONE, SandboxState
from gpushare.agent.runtime.supervisor import PodSupervisor
from gpushare.kube.client import NODES, KubeClient

log = logging.getLogger("gpushare.agent")

CONFIG_ERROR = "CreateContainerConfigError"


@dataclass(frozen=True, slots=True)
class ResourceConfig:
    #: Pod cgroups: auto (when the host allows), required, none (runtime/nodelimits.py).
    cgroups: str = "auto"
    #: Where the pods' cgroups go (default: under the agent's own, one per data directory).
    cgroup_parent: str | None = None
    #: Each pod's pids.max (the kubelet's podPidsLimit); None: no limit.
    pod_pids_limit: int | None = DEFAULT_POD_PIDS
    #: Seconds between measurements of the pods' local storage and the node's free space.
    storage_check_s: float = 10.0
    #: Disk pressure below this fraction of the data directory's file system free.
    disk_min_free: float = DEFAULT_MIN_FREE_FRACTION
    #: Seconds between re-reads of the configMaps, Secrets and tokens mounted as volumes.
    volume_refresh_s: float = 15.0


class Refused(Exception):
    """The pod cannot be run here: it fails with `reason` and the message."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


Running = Callable[[], list[tuple[str, PodSupervisor]]]  # (namespace/name, supervisor)


class PodResources:
    def __init__(self, kube: KubeClient, node_name: str, data_dir: Path,
                 config: ResourceConfig, running: Running,
                 publish: Callable[[], None]) -> None:
        self.kube = kube
        self.node_name = node_name
        self.config = config
        self.limits = NodeLimits.choose(config.cgroups, data_dir, config.cgroup_parent,
                                        config.pod_pids_limit)
        self._running = running
        self._publish = publish  # the heartbeat: the Node's conditions
        self.storage = StorageEnforcer(data_dir, config.disk_min_free, self._tracked, self)
        self.disk_pressure = False
        self._taint_written: bool | None = None

    # --- the Node ----------------------------------------------------------------------

    def conditions(self, now: float, since: float) -> list[dict[str, Any]]:
        return [self.limits.condition(now, since),
                pressure_condition(self.disk_pressure, now, since)]

    # --- a pod ---------------------------------------------------------------------------

    def admit(self, pod: Mapping[str, Any], directory: Path) -> PodLimits | None:
        """The pod's cgroups (None: the node runs it without); `Refused` when its spec
        has a value that cannot be applied or the node cannot limit it as it must."""
        try:
            storage_limits(pod)
            for i, container in enumerate((pod.get("spec") or {}).get("containers") or []):
                probes_of(container, f"spec.containers[{i}]")
            return self.limits.for_pod(pod, directory)
        except (LimitsError, StorageSpecError, ProbeSpecError) as exc:
            raise Refused(CONFIG_ERROR, str(exc)) from exc
        except LimitsRefused as exc:
            raise Refused(REFUSED, str(exc)) from exc

    @staticmethod
    def volumes_for(pod: Mapping[str, Any], directory: Path, values: ValueSource,
                    tokens: TokenSource, state: SandboxState) -> PodVolumes:
        owner = None if state.mode == NONE else Owner(state.uid, state.gid)
        return PodVolumes(pod, directory, values, tokens, owner)

    @staticmethod
    def release(supervisor: PodSupervisor) -> None:
        """After the pod's processes are gone: its cgroups (and what is left in them)."""
        if supervisor.limits is not None:
            supervisor.limits.remove()

    @staticmethod
    def clean_directory(directory: Path) -> None:
        """After an agent restart: the cgroups recorded in the directory of a pod that is
        gone (and only those: the other pods run on)."""
        remove_recorded(directory)

    def clean(self, live_uids: Iterable[str]) -> None:
        """After an agent restart: every pod cgroup under the node's parent that no live
        pod owns, with what still runs in it."""
        for uid in self.limits.clean(live_uids):
            log.info("removed the cgroups of pod %s, which is gone", uid)

    # --- periodic passes -------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """The storage pass every `storage_check_s`, the volume refresh every
        `volume_refresh_s`, until `stop`."""
        storage_at = volumes_at = time.monotonic()
        while not stop.wait(min(self.config.storage_check_s, self.config.volume_refresh_s)):
            now = time.monotonic()
            if now - storage_at >= self.config.storage_check_s:
                storage_at = now
                self._storage_pass()
            if now - volumes_at >= self.config.volume_refresh_s:
                volumes_at = now
                self.refresh_volumes()

    def _storage_pass(self) -> None:
        try:
            self.storage.once()
        except Exception as exc:
            log.warning("storage pass failed: %s", exc)

    def refresh_volumes(self) -> None:
        """configMap, Secret and token files follow their sources (about a minute, as a
        kubelet's sync period and cache allow)."""
        for key, supervisor in self._running():
            if supervisor.volumes is None:
                continue
            try:
                changed = supervisor.volumes.refresh()
            except Exception as exc:
                log.warning("volumes of %s: %s", key, exc)
                continue
            if changed:
                log.info("volumes %s of %s updated", changed, key)

    def _tracked(self) -> list[TrackedPod]:
        return [TrackedPod(key, s.pod, s.directory,
                           s.volumes.empty_dirs() if s.volumes is not None else {})
                for key, s in self._running()]

    def evict(self, key: str, message: str) -> None:
        """Kill the pod now: its supervisor fails it with reason Evicted and an Event."""
        for running, supervisor in self._running():
            if running == key:
                supervisor.kill(EVICTED, message, event=True)

    def pressure(self, state: DiskState) -> None:
        """After a storage pass: the DiskPressure condition (sent with the heartbeats) and
        the node.kubernetes.io/disk-pressure:NoSchedule taint, written until it holds."""
        if state.pressure != self.disk_pressure:
            log.warning("disk pressure %s: %d bytes free of %d (threshold %d)",
                        "begins" if state.pressure else "is over", state.free, state.total,
                        state.threshold)
            self.disk_pressure = state.pressure
        if self._taint_written == state.pressure:
            return
        try:
            node = self.kube.get(NODES.item(self.node_name)) or {}
            taints = with_taint((node.get("spec") or {}).get("taints") or [], state.pressure)
            if taints is not None:
                self.kube.merge_patch(NODES.item(self.node_name), {"spec": {"taints": taints}})
            self._publish()
            self._taint_written = state.pressure
        except Exception as exc:  # the API may be away: the next pass writes it again
            log.warning("could not publish disk pressure: %s", exc)


def remove_pod_directory(directory: Path) -> None:
    """Unmount the pod's volumes, then remove its directory (a removal through a bind
    mount would delete what the mount shows, a hostPath's files included)."""
    unmount_all(directory)
    shutil.rmtree(directory, ignore_errors=True)
