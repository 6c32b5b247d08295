"""Container probes as a kubelet runs them: liveness, readiness and startup, by ``exec``,
``httpGet``, ``tcpSocket`` or ``grpc`` (the gRPC health protocol, through ``grpcio`` and
``grpcio-health-checking``).

* Defaults: ``periodSeconds`` 10, ``timeoutSeconds`` 1, ``successThreshold`` 1,
  ``failureThreshold`` 3, ``initialDelaySeconds`` 0.
* A startup probe holds the other two back until it has succeeded; failing
  ``failureThreshold`` times in a row it ends the container, as a failing liveness probe
  does (the restart policy then decides).
* Readiness decides the container's ``ready`` (and so the pod's ``Ready`` condition and
  its place in its Services' EndpointSlices); it starts out not ready.
* Each failure is an ``Unhealthy`` event (``Readiness probe failed: ...``).

Where a probe connects is one function, `pod_address`: the pod's own address when it has a
network namespace of its own (the node reaches it over the bridge, as a kubelet reaches a
pod's IP), the loopback address only for a pod on the node's network.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

LIVENESS, READINESS, STARTUP = "liveness", "readiness", "startup"
KINDS = {LIVENESS: "livenessProbe", READINESS: "readinessProbe", STARTUP: "startupProbe"}
HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc")

ExecRunner = Callable[[list[str], float], tuple[int, bytes]]  # (argv, timeout) → code, output
EventSink = Callable[[str, str, bool], None]  # (reason, message, warning)


class ProbeSpecError(ValueError):
    """A probe cannot be run as written; the message names the field."""


LOOPBACK = "127.0.0.1"


def pod_address(pod: Mapping[str, Any], pod_ip: str | None) -> str:
    """Where probes and ``httpGet`` hooks (anything of the node's) reach the pod's ports:
    `pod_ip`, the pod's address in its own network namespace; the loopback address for a
    pod on the node's network (``hostNetwork``, or a node whose pods share its network:
    `pod_ip` None)."""
    if (pod.get("spec") or {}).get("hostNetwork") or not pod_ip:
        return LOOPBACK
    return pod_ip


@dataclass(frozen=True, slots=True)
class Probe:
    kind: str
    handler: str
    action: Mapping[str, Any]
    initial_delay: float = 0.0
    period: float = 10.0
    timeout: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3


def _number(raw: Mapping[str, Any], key: str, default: int, low: int, field: str) -> int:
    value = raw.get(key, default)
    if value is None:
        return default
    if not isinstance(value, int) or value < low:
        raise ProbeSpecError(f"{field}.{key}: {value!r} must be an integer of at least {low}")
    return value


def _port(container: Mapping[str, Any], raw: object, field: str) -> int:
    if isinstance(raw, int) and 0 < raw < 65536:
        return raw
    if isinstance(raw, str):
        if raw.isdigit() and 0 < int(raw) < 65536:
            return int(raw)
        for port in container.get("ports") or []:
            if port.get("name") == raw and isinstance(port.get("containerPort"), int):
                return int(port["containerPort"])
    raise ProbeSpecError(f"{field}.port: {raw!r} is neither a port number nor a named "
                         "container port")


def probes_of(container: Mapping[str, Any], field: str) -> list[Probe]:
    """The container's probes (`field` its path, e.g. ``spec.containers[0]``)."""
    out = []
    for kind, key in KINDS.items():
        raw = container.get(key)
        if not raw:
            continue
        where = f"{field}.{key}"
        handlers = [h for h in HANDLERS if raw.get(h) is not None]
        if len(handlers) != 1:
            raise ProbeSpecError(f"{where}: needs exactly one of {', '.join(HANDLERS)}")
        handler = handlers[0]
        action = dict(raw[handler])
        if handler == "exec" and not action.get("command"):
            raise ProbeSpecError(f"{where}.exec.command: required")
        if handler != "exec":
            action["port"] = _port(container, action.get("port"), f"{where}.{handler}")
        success = _number(raw, "successThreshold", 1, 1, where)
        if kind != READINESS and success != 1:
            raise ProbeSpecError(f"{where}.successThreshold: must be 1")
        out.append(Probe(kind, handler, action,
                         float(_number(raw, "initialDelaySeconds", 0, 0, where)),
                         float(_number(raw, "periodSeconds", 10, 1, where)),
                         float(_number(raw, "timeoutSeconds", 1, 1, where)),
                         success, _number(raw, "failureThreshold", 3, 1, where)))
    return out


# --- one check ----------------------------------------------------------------------------

def check(probe: Probe, address: str, run_exec: ExecRunner) -> tuple[bool, str]:
    """Run the probe once: (success, the kubelet's words for a failure)."""
    action = probe.action
    try:
        if probe.handler == "exec":
            argv = [str(a) for a in action.get("command") or []]
            try:
                code, output = run_exec(argv, probe.timeout)
            except subprocess.TimeoutExpired:
                return False, f"command {argv!r} timed out"
            return code == 0, output.decode(errors="replace").strip()
        host = str(action.get("host") or address)
        port = int(action["port"])
        if probe.handler == "tcpSocket":
            with socket.create_connection((host, port), timeout=probe.timeout):
                return True, ""
        if probe.handler == "httpGet":
            return _http(action, host, port, probe.timeout)
        return _grpc(action, host, port, probe.timeout)
    except OSError as exc:
        return False, _dial_error(probe, host if probe.handler != "exec" else "", exc)


def _dial_error(probe: Probe, host: str, exc: OSError) -> str:
    port = probe.action.get("port")
    why = exc.strerror or str(exc) or type(exc).__name__
    if probe.handler == "httpGet":
        scheme = str(probe.action.get("scheme") or "HTTP").lower()
        path = str(probe.action.get("path") or "/")
        return f'Get "{scheme}://{host}:{port}{path}": dial tcp {host}:{port}: {why.lower()}'
    return f"dial tcp {host}:{port}: connect: {why.lower()}"


def _http(action: Mapping[str, Any], host: str, port: int, timeout: float) -> tuple[bool, str]:
    scheme = str(action.get("scheme") or "HTTP").upper()
    if scheme == "HTTPS":  # as the kubelet: the certificate is not checked
        context = ssl._create_unverified_context()
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            host, port, timeout=timeout, context=context)
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    headers = {"User-Agent": "kube-probe/1.32", "Accept": "*/*"}
    for header in action.get("httpHeaders") or []:
        headers[str(header.get("name"))] = str(header.get("value") or "")
    try:
        conn.request("GET", str(action.get("path") or "/"), headers=headers)
        response = conn.getresponse()
        response.read(10 * 1024)
    finally:
        conn.close()
    if 200 <= response.status < 400:
        return True, ""
    return False, f"HTTP probe failed with statuscode: {response.status}"


def _grpc(action: Mapping[str, Any], host: str, port: int, timeout: float) -> tuple[bool, str]:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    target = f"{host}:{port}"
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            answer = stub.Check(health_pb2.HealthCheckRequest(
                service=str(action.get("service") or "")), timeout=timeout)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            if code == grpc.StatusCode.DEADLINE_EXCEEDED or code == grpc.StatusCode.UNAVAILABLE:
                return False, (f'timeout: failed to connect service "{target}" within '
                               f"{timeout:g}s")
            return False, f"rpc error: {exc}"
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)
    if answer.status == health_pb2.HealthCheckResponse.SERVING:
        return True, ""
    return False, f'service unhealthy (responded with "{status}")'


# joins the cgroup.procs files before "--", then runs the rest (the container wrapper's way)
JOIN_CGROUPS = ('while [ "$1" != "--" ]; do printf "%s\\n" "$$" > "$1" || exit 125; shift; '
                'done; shift; exec "$@"')


def join_cgroups(procs: tuple[str, ...], argv: list[str]) -> list[str]:
    """`argv` run by a shell that first joins the cgroups whose ``cgroup.procs`` these are
    (an exec'd command or exec probe counts against the container's limits)."""
    return ["/bin/sh", "-c", JOIN_CGROUPS, "sh", *procs, "--", *argv] if procs else argv


def run_in_group(argv: list[str], env: Mapping[str, str], cwd: str,
                 timeout: float) -> tuple[int, bytes]:
    """Run `argv` in a session of its own, killed as a group past `timeout`."""
    proc = subprocess.Popen(argv, env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return proc.returncode, output


# --- a container run's probes ------------------------------------------------------------

class ContainerProber:
    """The probes of one container run, each in a thread of its own. `ready`, `started`
    and `failed` (the liveness or startup probe gave up: end the run) are read by the
    supervisor."""

    def __init__(self, container: str, probes: list[Probe], address: Callable[[], str],
                 run_exec: ExecRunner, event: EventSink) -> None:
        self.container = container
        self._probes = probes
        self._address = address
        self._run_exec = run_exec
        self._event = event
        kinds = {p.kind for p in probes}
        self._stop = threading.Event()
        self._started = threading.Event()
        if STARTUP not in kinds:
            self._started.set()
        self.ready = READINESS not in kinds  # without a readiness probe: ready when started
        self.failed: str | None = None
        self._threads: list[threading.Thread] = []

    @property
    def started(self) -> bool:
        return self._started.is_set()

    def start(self) -> None:
        for probe in self._probes:
            thread = threading.Thread(target=self._loop, args=(probe,), daemon=True,
                                      name=f"probe {self.container} {probe.kind}")
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()

    def _loop(self, probe: Probe) -> None:
        if probe.kind != STARTUP:  # liveness and readiness wait for the startup probe
            while not self._started.is_set():
                if self._stop.wait(0.1):
                    return
        if self._stop.wait(probe.initial_delay):
            return
        successes = failures = 0
        while not self._stop.is_set():
            ok, message = check(probe, self._address(), self._run_exec)
            if self._stop.is_set():
                return
            if ok:
                successes, failures = successes + 1, 0
            else:
                successes, failures = 0, failures + 1
                label = probe.kind.capitalize()
                self._event("Unhealthy", f"{label} probe failed: {message}", True)
            if self._record(probe, ok, successes, failures):
                return
            if self._stop.wait(probe.period):
                return

    def _record(self, probe: Probe, ok: bool, successes: int, failures: int) -> bool:
        """Apply one result; True when this probe has nothing more to do."""
        if probe.kind == STARTUP:
            if ok:
                self._started.set()
                return True
            if failures >= probe.failure_threshold:
                self.failed = "startup"
                return True
            return False
        if probe.kind == READINESS:
            if ok and successes >= probe.success_threshold:
                self.ready = True
            elif not ok and failures >= probe.failure_threshold:
                self.ready = False
            return False
        if not ok and failures >= probe.failure_threshold:
            self.failed = "liveness"
            return True
        return False

    def join(self, timeout: float) -> None:
        """Wait (up to `timeout`) for the probe threads to notice `stop`."""
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
