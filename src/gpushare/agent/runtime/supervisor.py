"""One pod's life on this node: init containers, then the containers, restarts, deletion.

A `PodSupervisor` runs in a thread of its own. It does not talk to the API: it hands status
dicts to a `PodStatusSink`, which the agent turns into API writes (and which the GPU
experiment replaces by a recorder).
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gpushare.agent.pods.podspec import ContainerPlan, PodSpecError
from gpushare.agent.pods.podstatus import ContainerRecord, PodView, build_status, phase_of
from gpushare.agent.pods.volumes import PodVolumes, VolumeError
from gpushare.agent.runtime import process as proc
from gpushare.agent.runtime import sandbox as sb
from gpushare.agent.runtime.cgroups import CgroupError
from gpushare.agent.runtime.hooks import MIN_TERM_GRACE_S, pre_stop, run_hook, run_pre_stops
from gpushare.agent.runtime.leftovers import BeforeSignal
from gpushare.agent.runtime.logshim import LogLimits
from gpushare.agent.runtime.logstore import META_DIR, ensure_log_file, log_path
from gpushare.agent.runtime.podlimits import PodLimits
from gpushare.agent.runtime.probes import (
    READINESS,
    STARTUP,
    ContainerProber,
    ExecRunner,
    join_cgroups,
    pod_address,
    probes_of,
    run_in_group,
)
from gpushare.agent.runtime.sandbox import SandboxState
from gpushare.agent.runtime.stdio import ContainerStdin, StdioSpec, open_stdio
from gpushare.api.objects import Meta

log = logging.getLogger("gpushare.agent")

RESET_BACKOFF_AFTER_S = 600.0  # as the kubelet: ten minutes of running resets the back-off

Planner = Callable[[dict[str, Any], bool], ContainerPlan]  # (container, init) -> plan


class PodStatusSink(Protocol):
    def report(self, status: dict[str, Any]) -> None: ...

    def terminated(self) -> None:
        """All processes are gone after a deletion: the pod object may be removed."""

    def event(self, reason: str, message: str, warning: bool = False) -> None:
        """Something `kubectl describe pod` should show (Started, BackOff, Killing...)."""


@dataclass(frozen=True, slots=True)
class SupervisorConfig:
    host_ip: str = "127.0.0.1"
    backoff_base_s: float = 10.0
    backoff_max_s: float = 300.0
    poll_s: float = 0.1
    default_grace_s: float = 30.0
    log_limits: LogLimits = field(default_factory=LogLimits)  # containerLogMaxSize/MaxFiles


@dataclass(slots=True)
class _Slot:
    spec: dict[str, Any]
    record: ContainerRecord
    process: proc.ContainerProcess | None = None
    run: int = 0  # run number (log file) of the current or last run
    next_start: float = 0.0  # monotonic time
    launching: bool = False  # the log file may exist before the process does
    streak: int = 0  # quick exits in a row: the back-off exponent
    plan: ContainerPlan | None = None  # what the current run was started with
    prober: ContainerProber | None = None  # the current run's probes
    kill_at: float | None = None  # a failed probe's SIGTERM was sent: SIGKILL from then on
    stdin: ContainerStdin | None = None  # the run's input (stdin: true), kept by the agent
    node_stopped: bool = False  # its last run was ended by the node's shutdown


class PodSupervisor:
    def __init__(
        self,
        pod: dict[str, Any],
        directory: Path,
        planner: Planner,
        sink: PodStatusSink,
        config: SupervisorConfig,
        sandbox: SandboxState | None = None,
        limits: PodLimits | None = None,
        volumes: PodVolumes | None = None,
        pod_ip: str | None = None,
        before_signal: BeforeSignal | None = None,
    ) -> None:
        self.pod = pod
        self._before_signal = before_signal
        self.pod_ip = pod_ip  # its address in its own network namespace; None: the node's
        self.limits = limits  # the pod's cgroups; None: the node enforces none
        self.volumes = volumes  # set up before the first container starts
        self._volumes_ready = volumes is None or not volumes.wanted
        self._mount_retry = 0.0
        self._mount_error: str | None = None
        self._mount_event_at = 0.0
        self.sandbox = sandbox  # None: the processes run as the agent's user, unconfined
        self.directory = directory
        self.uid = Meta.of(pod).uid
        self._planner = planner
        self._sink = sink
        self._config = config
        spec = pod.get("spec") or {}
        self.restart_policy = spec.get("restartPolicy") or "Always"
        self._init = [
            _Slot(spec=c, record=ContainerRecord(name=c.get("name", ""), init=True))
            for c in spec.get("initContainers") or []
        ]
        self._main = [
            _Slot(spec=c, record=ContainerRecord(name=c.get("name", "")))
            for c in spec.get("containers") or []
        ]
        self._lock = threading.Lock()
        self._stop_grace: float | None = None  # set when the pod is being deleted
        self._kill: tuple[str, str] | None = None  # (reason, message) from the watchdog
        self._gpu_fault: tuple[str, str] | None = None  # (reason, message): restart the runs
        self._detached = False
        self._shutdown_grace: float | None = None
        self._failed: tuple[str, str] | None = None
        self._finished = threading.Event()
        # Set when the pod's processes have ended for good, before that is published: from
        # then on its GPU share is free for the pod the scheduler binds in its place.
        self._released = threading.Event()
        self._scheduled_at = time.time()
        self._started_at: float | None = None
        self._last_report: dict[str, Any] | None = None
        self._thread: threading.Thread | None = None
        self.meta = directory / META_DIR

    # --- control from the agent's threads ---------------------------------------------

    def start(self) -> None:
        """Pick up what a previous agent recorded for this pod, then supervise it on a
        thread of its own. The record is read here, before the caller goes on: a pod that
        had ended holds no GPU share from the moment it is picked up, so the agent's
        ledger, which next looks at the pods bound after it, does not count it."""
        try:
            self._restore()
            restored = True
        except Exception:
            log.exception("pod %s: its recorded state could not be read", self.name)
            restored = False
        if restored and self._phase() in ("Succeeded", "Failed"):
            self._released.set()
        key = f"{Meta.of(self.pod).namespace}/{self.name}"
        self._thread = threading.Thread(target=self._run, args=(restored,), name=f"pod {key}",
                                        daemon=True)
        self._thread.start()

    @property
    def name(self) -> str:
        return Meta.of(self.pod).name

    def stop(self, grace_s: float | None) -> None:
        """The pod is being deleted: SIGTERM, wait up to the grace period, SIGKILL."""
        with self._lock:
            grace = self._config.default_grace_s if grace_s is None else grace_s
            if self._stop_grace is None or grace < self._stop_grace:
                self._stop_grace = grace

    def kill(self, reason: str, message: str, event: bool = False) -> None:
        """The watchdog found the pod over its share, or the node evicts it: SIGKILL now and
        fail the pod (with `event`, a Warning event of that reason and message too)."""
        if event:
            self._event(reason, message, warning=True)
        with self._lock:
            if self._kill is None:
                self._kill = (reason, message)

    def gpu_fault(self, reason: str, message: str) -> None:
        """The pod's GPU context is lost (its MPS server went into FAULT): end the running
        containers through the one stop path and restart them by the restart policy."""
        with self._lock:
            if self._gpu_fault is None:
                self._gpu_fault = (reason, message)

    def shutdown(self, cap_s: float) -> None:
        """The agent is stopping: end the processes like a node going down (the pod's own
        grace period, at most `cap_s`), but leave the pod (no deletion); a restarted agent
        starts the stopped runs again, without counting the stop as a crash."""
        with self._lock:
            self._shutdown_grace = min(self.grace_s(), cap_s)

    def detach(self) -> None:
        """Stop supervising without touching the processes (as if the agent had died)."""
        with self._lock:
            self._detached = True

    def wait(self, timeout: float | None = None) -> bool:
        return self._finished.wait(timeout)

    @property
    def finished(self) -> bool:
        return self._finished.is_set()

    def wait_released(self, timeout: float) -> bool:
        """Wait until the pod no longer holds its GPU share (see `holds_gpu`)."""
        deadline = time.monotonic() + timeout
        while self.holds_gpu:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._released.wait(min(left, 0.05))
        return True

    @property
    def holds_gpu(self) -> bool:
        """Whether the pod may still use its GPU share: not once it has ended for good
        (a terminal phase, or stopped for its deletion), although its supervisor keeps its
        status and logs until the pod object is gone. The scheduler frees the share when
        it sees the end published, so this turns false before that is published."""
        return not (self._released.is_set() or self._finished.is_set())

    def process_groups(self) -> list[int]:
        return [s.process.pgid for s in self._init + self._main if s.process is not None]

    def container_groups(self) -> list[tuple[str, int]]:
        """(container name, process group) of each container running now."""
        return [(s.record.name, s.process.pgid) for s in self._init + self._main
                if s.process is not None]

    def cgroup_procs(self, container: str) -> tuple[str, ...]:
        """The ``cgroup.procs`` an exec into the container joins (none without limits)."""
        if self.limits is None:
            return ()
        return self.limits.container_cgroup(container).procs_files()

    def stdin_for(self, container: str) -> ContainerStdin | None:
        """The running container's input, when it has one (``stdin: true``) still open."""
        for slot in self._init + self._main:
            if slot.record.name == container and slot.process is not None:
                return slot.stdin if slot.stdin is not None and not slot.stdin.closed else None
        return None

    def container_running(self, container: str) -> bool:
        """Whether the container's current run is going (a log follow ends with the run)."""
        return any(
            slot.record.name == container and (slot.process is not None or slot.launching)
            for slot in self._init + self._main
        )

    def exec_plan(self, container: str) -> ContainerPlan | None:
        """The command, environment and working dir of the container's running run (for
        `kubectl exec`); None when it is not running. A run adopted after an agent
        restart is planned again from the spec."""
        for slot in self._init + self._main:
            if slot.record.name != container or slot.process is None:
                continue
            if slot.plan is None:
                slot.plan = self._planner(slot.spec, slot.record.init)
            return slot.plan
        return None

    def _event(self, reason: str, message: str, warning: bool = False) -> None:
        emit = getattr(self._sink, "event", None)
        if emit is not None:
            emit(reason, message, warning)

    # --- the pod's thread -------------------------------------------------------------

    def _run(self, restored: bool = True) -> None:
        try:
            if not restored:
                return  # its recorded processes may still run: never start them twice
            self._publish()
            while True:
                with self._lock:
                    stop_grace, kill, detached = self._stop_grace, self._kill, self._detached
                    shutdown = self._shutdown_grace
                if detached:
                    break
                if shutdown is not None and stop_grace is None and kill is None:
                    self._end_processes(shutdown, final=False)
                    break
                if kill is not None:
                    self._do_kill(*kill)
                    break
                if stop_grace is not None:
                    self._do_stop(stop_grace)
                    self._sink.terminated()
                    break
                with self._lock:
                    fault, self._gpu_fault = self._gpu_fault, None
                if fault is not None:
                    self._restart_after_fault(*fault)
                try:
                    changed = self._step()
                except Exception:  # keep supervising; the next pass tries again
                    log.exception("pod %s: supervision step failed", self.name)
                    changed = False
                if changed:
                    if self._phase() in ("Succeeded", "Failed"):
                        self._released.set()
                    self._save()
                    self._publish()
                if self._phase() in ("Succeeded", "Failed"):
                    self._released.set()
                    self._idle_until_deleted()
                    break
                time.sleep(self._config.poll_s)
        finally:
            self._finished.set()

    def _idle_until_deleted(self) -> None:
        """A finished pod keeps its logs and status until it is deleted."""
        while True:
            with self._lock:
                grace, detached = self._stop_grace, self._detached
                shutdown = self._shutdown_grace is not None
            if detached or (shutdown and grace is None):
                return
            if grace is not None:
                self._sink.terminated()
                return
            time.sleep(self._config.poll_s * 2)

    def _phase(self) -> str:
        failed = self._failed[0] if self._failed else None
        return phase_of([s.record for s in self._init], [s.record for s in self._main], failed)

    def _step(self) -> bool:
        now = time.monotonic()
        changed = False
        if not self._volumes_ready and not self._setup_volumes(now):
            return False
        # init containers one after the other, each must succeed
        for slot in self._init:
            if slot.record.succeeded:
                continue
            if slot.record.done:  # failed for good
                return changed
            changed |= self._advance(slot, now, init=True)
            return changed
        for slot in self._main:
            if not slot.record.done:
                changed |= self._advance(slot, now, init=False)
        return changed

    def _advance(self, slot: _Slot, now: float, init: bool) -> bool:
        if slot.process is None:
            if now < slot.next_start:
                return False
            return self._launch(slot, init)
        code = slot.process.poll()
        if code is None:
            return self._watch_probes(slot, now, init)
        if self.limits is not None and self.limits.oom_killed(slot.record.name):
            limit = self.limits.limits_of(slot.record.name).memory_bytes
            self._event("OOMKilling", f"Memory cgroup out of memory: killed a process of "
                        f"container {slot.record.name} (memory limit {limit} bytes)",
                        warning=True)
            self._finish_run(slot, code, reason="OOMKilled")
        else:
            self._finish_run(slot, code)
        return True

    def _finish_run(
        self,
        slot: _Slot,
        code: int,
        reason: str | None = None,
        message: str | None = None,
        final: bool = False,
        quiet: bool = False,
    ) -> None:
        """Record how a run ended; schedule the restart its policy asks for unless `final`."""
        record = slot.record
        if slot.stdin is not None:
            slot.stdin.close()
            slot.stdin = None
        if slot.prober is not None:
            slot.prober.stop()
        slot.prober, slot.kill_at = None, None
        record.probe_ready = record.probe_started = None
        record.exit_code = code
        record.reason = reason or ("Completed" if code == 0 else "Error")
        record.message = message
        record.started_at = record.running_since
        record.finished_at = time.time()
        record.running_since = None
        slot.process = None
        if not final and self._should_restart(code, init=record.init):
            ran = record.finished_at - (record.started_at or record.finished_at)
            if ran >= RESET_BACKOFF_AFTER_S:  # a run that lasted starts the back-off afresh
                slot.streak = 0
            delay = min(
                self._config.backoff_max_s,
                self._config.backoff_base_s * (2 ** min(slot.streak, 16)),
            )
            slot.streak += 1
            slot.next_start = time.monotonic() + delay
            record.waiting_reason = "CrashLoopBackOff"
            record.waiting_message = (
                f"back-off {delay:g}s restarting failed container={record.name} "
                f"pod={self.name}_{Meta.of(self.pod).namespace}"
            )
            if not quiet:
                self._event("BackOff", f"Back-off restarting container {record.name} "
                            f"(exit code {code}, next start in {delay:g}s)", warning=True)
        else:
            record.done = True
            record.waiting_reason = None

    def _should_restart(self, code: int, init: bool) -> bool:
        if self.restart_policy == "Never":
            return False
        if init or self.restart_policy == "OnFailure":
            return code != 0
        return True  # Always

    def _launch(self, slot: _Slot, init: bool) -> bool:
        record = slot.record
        try:
            plan = self._planner(slot.spec, init)
        except Exception as exc:  # a bad spec, or the API unreachable for a configMap: retry
            record.waiting_reason = "CreateContainerConfigError"
            record.waiting_message = (
                str(exc) if isinstance(exc, PodSpecError) else f"{type(exc).__name__}: {exc}"
            )
            self._event("Failed", f"Error: {record.waiting_message}", warning=True)
            slot.next_start = time.monotonic() + max(1.0, self._config.backoff_base_s)
            return True
        slot.plan = plan
        slot.node_stopped = False
        if record.exit_code is not None:  # this is a restart
            record.last = record.terminated()
            record.restart_count += 1
        run = record.restart_count
        log = log_path(self.directory, record.name, run)
        slot.launching = True
        ensure_log_file(log)
        exit_file = self.meta / "exit" / f"{record.name}.{run}"
        stdio = open_stdio(StdioSpec.of(slot.spec))
        slot.stdin = stdio.handle
        try:
            slot.process = proc.start(
                plan.argv, plan.env, self.directory / plan.working_dir, log, exit_file,
                self.sandbox, self._cgroup_procs(record.name), self._config.log_limits, stdio,
            )
        except proc.StartError as exc:
            slot.launching = False
            self._event("Failed", f"Error: {exc}", warning=True)
            with log.open("a") as f:
                f.write(f"{exc}\n")
            record.running_since = time.time()
            slot.run = run
            self._finish_run(slot, 128, reason="StartError", message=str(exc))
            return True
        slot.launching = False
        slot.run = run
        # not ready (nor started) until its probe says so: no Ready before the first verdict
        record.probe_ready, record.probe_started = self._unprobed(slot)
        record.running_since = time.time()
        record.waiting_reason = None
        record.waiting_message = None
        if self._started_at is None:
            self._started_at = record.running_since
        self._event("Started", f"Started container {record.name}")
        return True

    def _unprobed(self, slot: _Slot) -> tuple[bool | None, bool | None]:
        """A fresh run's (readiness, startup) verdicts before its probes ran: False for each
        probe the container has, None (nothing to wait for) otherwise."""
        if slot not in self._main:
            return None, None
        index = self._main.index(slot)
        kinds = {p.kind for p in probes_of(slot.spec, f"spec.containers[{index}]")}
        return (False if READINESS in kinds else None, False if STARTUP in kinds else None)

    def _watch_probes(self, slot: _Slot, now: float, init: bool) -> bool:
        """Start the run's probes (once), follow their verdicts, and end the run whose
        liveness or startup probe gave up (SIGTERM, SIGKILL after the grace period)."""
        if init or slot.process is None:
            return False
        if slot.prober is None:
            index = self._main.index(slot)
            probes = probes_of(slot.spec, f"spec.containers[{index}]")
            if not probes:
                return False
            slot.prober = ContainerProber(slot.record.name, probes,
                                          lambda: pod_address(self.pod, self.pod_ip),
                                          self._probe_exec(slot), self._event)
            slot.prober.start()
        record, prober = slot.record, slot.prober
        before = (record.probe_ready, record.probe_started)
        record.probe_ready, record.probe_started = prober.ready, prober.started
        if prober.failed and slot.kill_at is None:
            grace = float((self.pod.get("spec") or {}).get("terminationGracePeriodSeconds")
                          or self._config.default_grace_s)
            self._event("Killing", f"Container {record.name} failed {prober.failed} probe, "
                        "will be restarted")
            slot.process.signal_group(signal.SIGTERM)
            slot.kill_at = now + grace
        elif slot.kill_at is not None and now >= slot.kill_at:
            slot.process.signal_group(signal.SIGKILL)
        return before != (record.probe_ready, record.probe_started)

    def _probe_exec(self, slot: _Slot) -> ExecRunner:
        """How an exec probe runs: in the container's sandbox and cgroups, as its user."""
        def run(argv: list[str], timeout: float) -> tuple[int, bytes]:
            process = slot.process
            if process is None:
                return 1, b"the container is not running"
            plan = slot.plan or self._planner(slot.spec, False)
            cwd = str(self.directory / plan.working_dir)
            command, env, where = list(argv), dict(plan.env), cwd
            if self.sandbox is not None and self.sandbox.mode != sb.NONE:
                command, env, where = sb.enter_argv(self.sandbox, process.pgid, argv,
                                                    plan.env, cwd)
            command = join_cgroups(self.cgroup_procs(slot.record.name), command)
            return run_in_group(command, env, where, timeout)
        return run

    def _setup_volumes(self, now: float) -> bool:
        """Mount the pod's volumes (retried every few seconds, a FailedMount event when the
        reason changes or a minute has passed): no container starts without them."""
        if now < self._mount_retry or self.volumes is None:
            return False
        try:
            self.volumes.setup()
        except (VolumeError, PodSpecError) as exc:
            message = str(exc)
            if message != self._mount_error or now - self._mount_event_at > 60:
                self._event("FailedMount", message, warning=True)
                self._mount_event_at = now
            self._mount_error = message
            self._mount_retry = now + 2.0
            return False
        self._volumes_ready = True
        return True

    def _cgroup_procs(self, container: str) -> tuple[str, ...]:
        """The container's cgroups (made now) for its run to join before its command."""
        if self.limits is None:
            return ()
        try:
            return self.limits.enter(container)
        except CgroupError as exc:
            raise proc.StartError(f"cgroup: {exc}") from exc

    def _all_slots(self) -> list[_Slot]:
        return self._init + self._main

    def _do_stop(self, grace: float) -> None:
        self._end_processes(grace, final=True)

    def _release_gpu(self, running: list[_Slot]) -> None:
        """Before any signal: the agent's hook for the runs' GPU work (MPS `terminate_client`
        with `--mps-stop terminate-client`, which returns once the server is done; nothing
        by default, where the signals alone stop the pod)."""
        groups = [s.process.pgid for s in running if s.process is not None]
        if self._before_signal is None or not groups:
            return
        try:
            self._before_signal(groups)
        except Exception:  # the signals still follow: the pod must stop
            log.exception("pod %s: ending its GPU work before the signals failed", self.name)

    def _terminate(self, running: list[_Slot], grace: float) -> None:
        """preStop hooks, the GPU hook (`_release_gpu`), then SIGTERM, wait up to `grace`
        (all of it, the hooks' time included), SIGKILL, reap."""
        deadline = time.monotonic() + grace
        hooks = [(s.record.name, self._hook_call(s, grace)) for s in running
                 if pre_stop(s.spec) is not None]
        if hooks:
            run_pre_stops(hooks, deadline, lambda name, why: self._event(
                "FailedPreStopHook", f"PreStopHook failed for container {name}: {why}",
                warning=True))
            deadline = max(deadline, time.monotonic() + MIN_TERM_GRACE_S)
        self._release_gpu(running)
        for slot in running:
            slot.process.signal_group(signal.SIGTERM)  # type: ignore[union-attr]
        while time.monotonic() < deadline and any(
            s.process is not None and s.process.group_alive() for s in running
        ):
            time.sleep(self._config.poll_s)
        for slot in running:
            slot.process.signal_group(signal.SIGKILL)  # type: ignore[union-attr]
        for slot in running:
            self._reap(slot)

    def _end_processes(self, grace: float, final: bool) -> None:
        """End the runs (`_terminate`). `final`: nothing of the pod runs again."""
        running = [s for s in self._all_slots() if s.process is not None]
        for slot in running:
            self._event("Killing", f"Stopping container {slot.record.name} "
                        f"(grace period {grace:g}s)")
        self._terminate(running, grace)
        for slot in running:
            code = slot.process.poll() if slot.process is not None else None  # type: ignore[union-attr]
            code = code if code is not None else proc.UNKNOWN_EXIT
            if final:
                self._finish_run_final(slot, code)
            else:
                self._finish_run(slot, code, quiet=True)
                slot.node_stopped = True  # the next agent starts it again without back-off
                slot.record.waiting_reason = "ContainerCreating"
        if final:
            for slot in self._all_slots():
                slot.record.done = True
                slot.record.waiting_reason = None
            self._released.set()
        self._save()
        self._publish()

    def _hook_call(self, slot: _Slot, grace: float) -> Callable[[], str | None]:
        hook = pre_stop(slot.spec) or {}
        address = pod_address(self.pod, self.pod_ip)
        return lambda: run_hook(hook, slot.spec, address, self._probe_exec(slot), grace)

    def grace_s(self) -> float:
        """The pod's own termination grace period."""
        raw = (self.pod.get("spec") or {}).get("terminationGracePeriodSeconds")
        return self._config.default_grace_s if raw is None else float(raw)

    def _reap(self, slot: _Slot) -> None:
        process = slot.process
        if process is None:
            return
        if process.popen is not None:
            with contextlib.suppress(Exception):
                process.popen.wait(timeout=5)
        deadline = time.monotonic() + 5
        while process.group_alive() and time.monotonic() < deadline:
            time.sleep(0.02)

    def _finish_run_final(
        self, slot: _Slot, code: int, reason: str | None = None, message: str | None = None
    ) -> None:
        self._finish_run(slot, code, reason, message, final=True)
        slot.next_start = float("inf")

    def _restart_after_fault(self, reason: str, message: str) -> None:
        """The runs lost their GPU context: end them, then the restart policy applies."""
        running = [s for s in self._all_slots() if s.process is not None]
        self._event(reason, message, warning=True)
        if not running:
            return
        self._terminate(running, min(5.0, self._config.default_grace_s))
        for slot in running:
            code = slot.process.poll() if slot.process is not None else None
            self._finish_run(slot, code if code is not None else proc.UNKNOWN_EXIT, reason,
                             message)
        self._save()
        self._publish()

    def _do_kill(self, reason: str, message: str) -> None:
        running = [s for s in self._all_slots() if s.process is not None]
        self._release_gpu(running)
        for slot in running:
            slot.process.signal_group(signal.SIGKILL)  # type: ignore[union-attr]
        for slot in running:
            self._reap(slot)
            code = slot.process.poll() if slot.process is not None else None  # type: ignore[union-attr]
            self._finish_run_final(slot, code if code is not None else 137, reason, message)
        for slot in self._all_slots():
            slot.record.done = True
            slot.record.waiting_reason = None
        self._failed = (reason, message)
        self._released.set()
        self._save()
        self._publish()
        self._idle_until_deleted()

    # --- status -------------------------------------------------------------------------

    def _publish(self) -> None:
        phase = self._phase()
        view = PodView(
            phase=phase,
            reason=self._failed[0] if self._failed else None,
            message=self._failed[1] if self._failed else None,
            initialized=all(s.record.succeeded for s in self._init),
            scheduled_at=self._scheduled_at,
            started_at=self._started_at or self._scheduled_at,
            host_ip=self._config.host_ip,
        )
        status = build_status(
            self.pod, view, [s.record for s in self._init], [s.record for s in self._main]
        )
        if status != self._last_report:
            self._last_report = status
            self._sink.report(status)

    # --- surviving an agent restart ------------------------------------------------------

    def _state_file(self) -> Path:
        return self.meta / "state.json"

    def _save(self) -> None:
        state = {
            "uid": self.uid,
            "scheduledAt": self._scheduled_at,
            "startedAt": self._started_at,
            "failed": list(self._failed) if self._failed else None,
            "containers": {
                ("init:" if s.record.init else "") + s.record.name: {
                    "restartCount": s.record.restart_count,
                    "run": s.run,
                    "runningSince": s.record.running_since,
                    "exitCode": s.record.exit_code,
                    "reason": s.record.reason,
                    "message": s.record.message,
                    "startedAt": s.record.started_at,
                    "finishedAt": s.record.finished_at,
                    "done": s.record.done,
                    "last": s.record.last,
                    "stoppedByNode": s.node_stopped,
                    "process": s.process.state() if s.process is not None else None,
                }
                for s in self._all_slots()
            },
        }
        self.meta.mkdir(parents=True, exist_ok=True)
        tmp = self._state_file().with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(self._state_file())

    def _restore(self) -> None:
        """Pick up processes a previous agent started for this same pod (same UID)."""
        try:
            state = json.loads(self._state_file().read_text())
        except (OSError, ValueError):
            return
        if state.get("uid") != self.uid:
            return
        self._scheduled_at = state.get("scheduledAt") or self._scheduled_at
        self._started_at = state.get("startedAt")
        if state.get("failed"):
            self._failed = tuple(state["failed"])  # type: ignore[assignment]
        saved = state.get("containers") or {}
        for slot in self._all_slots():
            entry = saved.get(("init:" if slot.record.init else "") + slot.record.name)
            if not entry:
                continue
            record = slot.record
            record.restart_count = int(entry.get("restartCount") or 0)
            record.exit_code = entry.get("exitCode")
            record.reason = entry.get("reason")
            record.message = entry.get("message")
            record.started_at = entry.get("startedAt")
            record.finished_at = entry.get("finishedAt")
            record.done = bool(entry.get("done"))
            record.last = entry.get("last") or {}
            record.waiting_reason = (
                None if (record.done or record.exit_code is not None) else (record.waiting_reason)
            )
            slot.run = int(entry.get("run") or 0)
            if entry.get("process"):
                slot.process = proc.adopt(entry["process"])
                record.running_since = entry.get("runningSince") or time.time()
            elif record.exit_code is not None and not record.done and entry.get(
                    "stoppedByNode"):
                # the node's shutdown ended it: not a crash, start it again now
                slot.next_start = time.monotonic()
                record.waiting_reason = "ContainerCreating"
            elif record.exit_code is not None and not record.done:
                # it had ended and was waiting for its back-off: restart after one more
                slot.next_start = time.monotonic() + self._config.backoff_base_s
                record.waiting_reason = "CrashLoopBackOff"
