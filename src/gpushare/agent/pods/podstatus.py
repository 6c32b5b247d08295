"""Pod status as the kubelet reports it, built from what the supervisor knows. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpushare.api.timefmt import rfc3339


@dataclass(slots=True)
class ContainerRecord:
    """What is known about one container of a pod; the supervisor mutates it."""

    name: str
    init: bool = False
    restart_count: int = 0
    running_since: float | None = None  # epoch seconds of the current run's start
    # last finished run
    exit_code: int | None = None
    reason: str | None = None
    message: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    # waiting (not yet started, or backing off)
    waiting_reason: str | None = "ContainerCreating"
    waiting_message: str | None = None
    done: bool = False  # will not run again
    last: dict[str, Any] = field(default_factory=dict)  # lastState.terminated of the run before
    probe_ready: bool | None = None  # the readiness probe's verdict (None: no probes)
    probe_started: bool | None = None  # the startup probe's (None: no probes)

    @property
    def running(self) -> bool:
        return self.running_since is not None

    @property
    def ready(self) -> bool:
        """Running, started (startup probe) and ready (readiness probe)."""
        return (self.running and self.probe_ready is not False
                and self.probe_started is not False)

    @property
    def succeeded(self) -> bool:
        return self.done and self.exit_code == 0

    def state(self) -> dict[str, Any]:
        if self.running_since is not None:
            return {"running": {"startedAt": rfc3339(self.running_since)}}
        if self.waiting_reason is not None and not self.done:
            waiting: dict[str, Any] = {"reason": self.waiting_reason}
            if self.waiting_message:
                waiting["message"] = self.waiting_message
            return {"waiting": waiting}
        if self.exit_code is not None:
            return {"terminated": self.terminated()}
        return {"waiting": {"reason": "PodInitializing"}}

    def terminated(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "exitCode": self.exit_code,
            "reason": self.reason or ("Completed" if self.exit_code == 0 else "Error"),
        }
        if self.message:
            out["message"] = self.message
        if self.started_at is not None:
            out["startedAt"] = rfc3339(self.started_at)
        if self.finished_at is not None:
            out["finishedAt"] = rfc3339(self.finished_at)
        return out

    def status(self, image: str) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "state": self.state(),
            "ready": self.ready and not self.init,
            "restartCount": self.restart_count,
            "image": image,
            "imageID": "",
            "started": self.running and self.probe_started is not False,
        }
        if self.init:
            out["ready"] = self.succeeded
        if self.last:
            out["lastState"] = {"terminated": self.last}
        return out


@dataclass(slots=True)
class PodView:
    phase: str
    reason: str | None
    message: str | None
    initialized: bool
    scheduled_at: float
    started_at: float | None
    host_ip: str


def phase_of(
    init: list[ContainerRecord],
    main: list[ContainerRecord],
    failed_reason: str | None,
) -> str:
    """Pending until the main containers start; Succeeded/Failed once nothing will run again."""
    if failed_reason is not None:
        return "Failed"
    if any(r.done and r.exit_code not in (None, 0) for r in init):
        return "Failed"
    if not all(r.succeeded for r in init):
        return "Pending"
    if main and all(r.done for r in main):
        return "Succeeded" if all(r.exit_code == 0 for r in main) else "Failed"
    if any(r.running or r.restart_count > 0 or r.exit_code is not None for r in main):
        return "Running"
    return "Pending"


def qos_class(pod: dict[str, Any]) -> str:
    """Guaranteed (every container's CPU and memory requests equal their limits, a request
    left out being its limit), BestEffort (no requests or limits at all), else Burstable."""
    spec = pod.get("spec") or {}
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    guaranteed, anything = bool(containers), False
    for container in containers:
        resources = container.get("resources") or {}
        limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
        anything |= any(k in d for d in (limits, requests) for k in ("cpu", "memory"))
        for name in ("cpu", "memory"):
            if name not in limits or str(requests.get(name, limits[name])) != str(limits[name]):
                guaranteed = False
    return "Guaranteed" if guaranteed else "Burstable" if anything else "BestEffort"


def build_status(
    pod: dict[str, Any],
    view: PodView,
    init: list[ContainerRecord],
    main: list[ContainerRecord],
) -> dict[str, Any]:
    images = {
        c.get("name"): c.get("image", "")
        for c in (pod.get("spec") or {}).get("initContainers", []) or []
    }
    images.update(
        {c.get("name"): c.get("image", "") for c in (pod.get("spec") or {}).get("containers") or []}
    )
    scheduled = rfc3339(view.scheduled_at)
    ready = view.phase == "Running" and bool(main) and all(r.ready for r in main)
    containers_ready = ready
    if view.phase == "Succeeded":
        ready = containers_ready = False

    def condition(kind: str, ok: bool, reason: str | None = None) -> dict[str, Any]:
        c: dict[str, Any] = {
            "type": kind,
            "status": "True" if ok else "False",
            "lastProbeTime": None,
            "lastTransitionTime": scheduled,
        }
        if reason and not ok:
            c["reason"] = reason
        return c

    status: dict[str, Any] = {
        "phase": view.phase,
        "conditions": [
            condition("PodScheduled", True),
            condition("Initialized", view.initialized, "ContainersNotInitialized"),
            condition("ContainersReady", containers_ready, "ContainersNotReady"),
            condition("Ready", ready, "ContainersNotReady"),
        ],
        "hostIP": view.host_ip,
        "hostIPs": [{"ip": view.host_ip}],
        "podIP": view.host_ip,
        "podIPs": [{"ip": view.host_ip}],
        "containerStatuses": [r.status(images.get(r.name, "")) for r in main],
        "qosClass": qos_class(pod),
    }
    if view.started_at is not None:
        status["startTime"] = rfc3339(view.started_at)
    if init:
        status["initContainerStatuses"] = [r.status(images.get(r.name, "")) for r in init]
    if view.reason:
        status["reason"] = view.reason
    if view.message:
        status["message"] = view.message
    return status
