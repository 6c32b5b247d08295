"""CUDA MPS: one control daemon per GPU, started, watched, limited and stopped by the agent.

Each GPU gets its own pipe and log directory under the agent's data dir, and its daemon sees
only that GPU (`CUDA_VISIBLE_DEVICES=<uuid>`), so the server it spawns serves that GPU alone:
a fatal fault in one GPU's clients, or a client ended there, touches no other GPU (NVIDIA's
MPS guide: fault containment is per server). Clients reach a daemon through
`CUDA_MPS_PIPE_DIRECTORY`.

What this module says to a daemon, and why:

* nothing before the signals when a pod stops (`--mps-stop signal`, the default): the
  pod's processes get SIGTERM, then SIGKILL after the grace period, like any pod's. On an
  H100 with driver 580.159.04, ending a client with `terminate_client` first made the
  server hit a fatal GPU error ~160 ms later and take every neighbour client down, with
  or without the pod sandbox, while the same stops by signals alone killed none
  (docs/performance.md).
* `terminate_client <server> <client>` before any signal reaches a client (`end_clients`),
  only with `--mps-stop terminate-client` (the way NVIDIA's MPS documentation gives to end a
  client with work in flight), and for the clients left on a server already in FAULT before its
  daemon is restarted (`gpufaults`): that server has no healthy client left to lose.
  The agent and its clients share the host's PID namespace, which is the daemon's.
* `set_default_active_thread_percentage` / `set_default_device_pinned_mem_limit` for the
  next server and `set_active_thread_percentage` / `set_device_pinned_mem_limit` for the
  running one (`apply_limits`): a client's own environment can only lower the server's
  limits, so the server's are what a program that unsets or raises its variables gets.
* `get_server_list`, `get_server_status`, `get_client_list` (`all_servers`), and the
  server's log (`log_lines`), to find a server in FAULT and the client whose fault it was
  (`mps_faults`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from gpushare.agent.node.inventory import GpuDevice

CONTROL = "nvidia-cuda-mps-control"
TERMINATE_TIMEOUT_S = 30.0  # the longest a terminate_client is waited for
FAULT = "FAULT"
#: How a pod on a shared GPU is stopped (`--mps-stop`): signals only, or the MPS
#: `terminate_client` of its clients first and then the signals.
STOP_SIGNAL = "signal"
STOP_TERMINATE_CLIENT = "terminate-client"
STOP_MODES = (STOP_SIGNAL, STOP_TERMINATE_CLIENT)

# (argv, env, stdin) -> (returncode, output); replaced in tests
CommandRunner = Callable[[list[str], dict[str, str], str | None], tuple[int, str]]


def run_command(argv: list[str], env: dict[str, str], stdin: str | None,
                timeout: float = 5.0) -> tuple[int, str]:
    daemonize = "-d" in argv[1:]
    try:
        done = subprocess.run(
            argv,
            input=stdin,
            env=env,
            # a daemon keeps inherited pipes open: give it none, or run() waits for ever
            stdin=subprocess.DEVNULL if daemonize else None,
            stdout=subprocess.DEVNULL if daemonize else subprocess.PIPE,
            stderr=subprocess.DEVNULL if daemonize else subprocess.STDOUT,
            text=True,
            # a query to a daemon that died can hang on its pipe: don't wait long for it
            timeout=20 if daemonize else timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)
    return done.returncode, done.stdout or ""


class MpsStopError(ValueError):
    """A stop mode that is not one of `STOP_MODES`."""


def parse_stop_mode(value: str) -> str:
    """`--mps-stop`'s value, checked."""
    if value not in STOP_MODES:
        raise MpsStopError(f"--mps-stop {value!r}: expected one of {', '.join(STOP_MODES)}")
    return value


def parse_pids(output: str) -> list[int]:
    """The process ids a daemon lists, one a line (other lines are messages)."""
    return [int(line) for line in (raw.strip() for raw in output.splitlines()) if line.isdigit()]


def parse_status(output: str) -> str:
    """`get_server_status`'s answer: ACTIVE, FAULT, INITIALIZING... ('' when it said none)."""
    for line in output.splitlines():
        words = line.strip().split()
        if words and words[-1].isalpha() and words[-1].isupper():
            return words[-1]
    return ""


_FAULT_LINE = re.compile(r"fault|fatal|exception|xid|illegal", re.IGNORECASE)
_SERVER_FAULT = re.compile(r"fatal GPU error|teardown in progress", re.IGNORECASE)
_CLIENT_PID = re.compile(r"(?:client|pid)\D{0,12}?(\d{2,9})", re.IGNORECASE)


def fault_clients(lines: Iterable[str]) -> list[int]:
    """Client process ids that log lines of a faulting server name (in order, once each)."""
    found: list[int] = []
    for line in lines:
        if not _FAULT_LINE.search(line):
            continue
        for match in _CLIENT_PID.finditer(line):
            pid = int(match.group(1))
            if pid not in found:
                found.append(pid)
    return found


@dataclass(frozen=True, slots=True)
class MpsServer:
    pid: int
    status: str  # as the daemon says: ACTIVE, FAULT, ...
    clients: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class EndedClient:
    gpu: int
    server: int
    client: int
    ok: bool
    answer: str
    seconds: float = 0.0  # how long the server took


@dataclass(slots=True)
class MpsDaemon:
    device: GpuDevice
    base: Path
    binary: str
    runner: CommandRunner
    restarts: int = 0
    limits: tuple[int, int] | None = None  # (thread %, pinned MiB) last applied
    log_offsets: dict[str, int] = field(default_factory=dict)

    @property
    def pipe_directory(self) -> Path:
        return self.base / f"gpu{self.device.index}" / "pipe"

    @property
    def log_directory(self) -> Path:
        return self.base / f"gpu{self.device.index}" / "log"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "CUDA_VISIBLE_DEVICES": self.device.uuid,
                "CUDA_MPS_PIPE_DIRECTORY": str(self.pipe_directory),
                "CUDA_MPS_LOG_DIRECTORY": str(self.log_directory),
            }
        )
        return env

    def control(self, command: str) -> tuple[int, str]:
        return self.runner([self.binary], self.env(), command + "\n")

    def alive(self) -> bool:
        if not (self.pipe_directory / "control").exists():
            return False
        code, _ = self.control("get_server_list")
        return code == 0

    def start(self) -> tuple[bool, str]:
        self.pipe_directory.mkdir(parents=True, exist_ok=True)
        self.log_directory.mkdir(parents=True, exist_ok=True)
        code, output = self.runner([self.binary, "-d"], self.env(), None)
        if code != 0:
            return False, output.strip() or f"{CONTROL} -d exited {code}"
        self.limits = None  # a new daemon has the defaults again
        return True, output.strip()

    def quit(self) -> None:
        if (self.pipe_directory / "control").exists():
            self.control("quit")

    def servers(self) -> list[MpsServer]:
        code, output = self.control("get_server_list")
        if code != 0:
            return []
        found = []
        for pid in parse_pids(output):
            _, status = self.control(f"get_server_status {pid}")
            _, clients = self.control(f"get_client_list {pid}")
            found.append(MpsServer(pid, parse_status(status), tuple(parse_pids(clients))))
        return found

    def terminate_client(self, server: int, client: int) -> tuple[bool, str]:
        """Ask the server to end the client's GPU work; returns once it has (the daemon
        answers when the server is done)."""
        argv, stdin = [self.binary], f"terminate_client {server} {client}\n"
        if self.runner is run_command:  # the server may take a while with work in flight
            code, output = run_command(argv, self.env(), stdin, timeout=TERMINATE_TIMEOUT_S)
        else:
            code, output = self.runner(argv, self.env(), stdin)
        text = output.strip()
        refused = code != 0 or re.search(r"error|fail|not found|invalid", text, re.I)
        return not refused, text

    def apply_limits(self, thread_percentage: int, memory_mib: int) -> bool:
        """The server-side limits of this GPU's clients; False when they were in force."""
        wanted = (thread_percentage, memory_mib)
        if self.limits == wanted:
            return False
        # the daemon sees one GPU, which is device 0 for it and for its server
        commands = [f"set_default_active_thread_percentage {thread_percentage}",
                    f"set_default_device_pinned_mem_limit 0 {memory_mib}M"]
        for server in self.servers():
            commands += [f"set_active_thread_percentage {server.pid} {thread_percentage}",
                         f"set_device_pinned_mem_limit {server.pid} 0 {memory_mib}M"]
        if all(self.control(c)[0] == 0 for c in commands):
            self.limits = wanted
        return True

    def new_log_lines(self) -> list[str]:
        """Lines the server and control logs got since the last call."""
        lines: list[str] = []
        for name in ("server.log", "control.log"):
            path = self.log_directory / name
            try:
                size = path.stat().st_size
                start = self.log_offsets.get(name, 0)
                if size < start:  # rotated or new
                    start = 0
                with path.open("rb") as f:
                    f.seek(start)
                    chunk = f.read(size - start)
                self.log_offsets[name] = size
            except OSError:
                continue
            lines += chunk.decode(errors="replace").splitlines()
        return lines


class MpsManager:
    """The per-GPU daemons; `supervise()` restarts any that died."""

    def __init__(
        self,
        devices: tuple[GpuDevice, ...],
        base: Path,
        binary: str | None = None,
        runner: CommandRunner = run_command,
        stop_mode: str = STOP_SIGNAL,
    ) -> None:
        self.stop_mode = parse_stop_mode(stop_mode)
        found = binary or shutil.which(CONTROL) or CONTROL
        self.daemons = {d.index: MpsDaemon(d, base, found, runner) for d in devices}
        self._lock = threading.Lock()
        self._recent: dict[int, list[str]] = {}  # per GPU: the last fault lines of its logs
        self.fresh: dict[int, list[str]] = {}  # per GPU: all lines the last pass read

    def start_all(self) -> list[str]:
        """Start every daemon; the errors, empty when all came up."""
        errors = []
        for daemon in self.daemons.values():
            if daemon.alive():
                continue
            ok, message = daemon.start()
            if not ok:
                errors.append(f"GPU {daemon.device.index}: {message}")
        return errors

    def supervise(self) -> list[int]:
        """Restart dead daemons; the GPU indices restarted."""
        restarted = []
        with self._lock:
            for index, daemon in self.daemons.items():
                if not daemon.alive():
                    ok, _ = daemon.start()
                    if ok:
                        daemon.restarts += 1
                        restarted.append(index)
        return restarted

    def restart(self, index: int) -> bool:
        """Quit a GPU's daemon (and with it its server) and start it again."""
        daemon = self.daemons[index]
        with self._lock:
            daemon.quit()
            deadline = time.monotonic() + 10
            while (daemon.pipe_directory / "control").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            ok, _ = daemon.start()
            if ok:
                daemon.restarts += 1
            return ok

    def pipe_directory(self, index: int) -> str | None:
        daemon = self.daemons.get(index)
        return str(daemon.pipe_directory) if daemon is not None else None

    def servers(self, index: int) -> list[MpsServer]:
        return self.daemons[index].servers()

    def clients(self) -> set[int]:
        """The process ids of every MPS client on this node now."""
        return {c for d in self.daemons.values() for s in d.servers() for c in s.clients}

    def apply_limits(self, limits: dict[int, tuple[int, int]]) -> list[int]:
        """Server-side (thread %, pinned MiB) per GPU index; the GPUs whose limits changed."""
        return [index for index, (pct, mib) in sorted(limits.items())
                if index in self.daemons and self.daemons[index].apply_limits(pct, mib)]

    def end_clients(self, pids: Iterable[int]) -> list[EndedClient]:
        """`terminate_client` for each of `pids` that is an MPS client, on whichever GPU's
        server it is; returns when the servers have ended their GPU work."""
        wanted = set(pids)
        ended: list[EndedClient] = []
        if not wanted:
            return ended
        for index, daemon in self.daemons.items():
            for server in daemon.servers():
                for client in sorted(wanted.intersection(server.clients)):
                    began = time.monotonic()
                    ok, answer = daemon.terminate_client(server.pid, client)
                    ended.append(EndedClient(index, server.pid, client, ok, answer,
                                             round(time.monotonic() - began, 3)))
        return ended

    def all_servers(self) -> list[tuple[int, MpsServer]]:
        """(GPU index, server) of every GPU's daemon now."""
        return [(index, server) for index, daemon in self.daemons.items()
                for server in daemon.servers()]

    def log_lines(self) -> dict[int, list[str]]:
        """Per GPU, the last lines of its server's and daemon's logs that speak of faults."""
        self.fresh = {}
        for index, daemon in self.daemons.items():
            new = daemon.new_log_lines()
            self.fresh[index] = new
            recent = self._recent.setdefault(index, [])
            recent.extend(line for line in new if _FAULT_LINE.search(line))
            del recent[:-50]
        return {index: list(lines) for index, lines in self._recent.items()}

    def log_says_faulting(self, index: int, server: int) -> bool:
        """Whether the lines the last `log_lines()` read say the server is handling a fatal
        fault or refusing clients while it tears down after one (seen on driver 580, where
        `get_server_status` may not say FAULT through it)."""
        mine = re.compile(rf"Server\s+{server}\]")
        return any(mine.search(line) and _SERVER_FAULT.search(line)
                   for line in self.fresh.get(index, []))

    def stop_all(self, wait_s: float = 10.0) -> list[int]:
        """Quit every daemon and wait (up to `wait_s`) for their servers to exit: a server
        left behind holds its GPU for a later daemon's clients. The servers still there."""
        servers = [s.pid for _, s in self.all_servers()]
        for daemon in self.daemons.values():
            daemon.quit()
        deadline = time.monotonic() + wait_s
        while servers and time.monotonic() < deadline:
            servers = [pid for pid in servers if psutil.pid_exists(pid)]
            time.sleep(0.1)
        return servers


def server_limits(shares: Iterable[tuple[int, int, int]]) -> dict[int, tuple[int, int]]:
    """Per GPU index, the server-side limits for its MPS clients: the largest thread
    percentage and pinned memory among the pods (gpu index, thread %, MiB) on it. A client
    cannot rise above these; with equal shares (the usual case) they are each pod's own."""
    limits: dict[int, tuple[int, int]] = {}
    for index, pct, mib in shares:
        old = limits.get(index, (0, 0))
        limits[index] = (max(old[0], pct), max(old[1], mib))
    return limits


def pod_processes(pgids: Iterable[int]) -> set[int]:
    """Every process of these process groups and all their descendants (a program may
    start a session of its own, which leaves the group but not the family)."""
    found: set[int] = set()
    wanted = set(pgids)
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) in wanted:
                found.add(proc.pid)
                found.update(c.pid for c in proc.children(recursive=True))
        except (OSError, psutil.Error):
            continue
    return found


def end_gpu_work(mps: MpsManager | None, pgids: Iterable[int]) -> list[EndedClient]:
    """The first step of every stop of a pod's processes on a shared GPU (deletion,
    eviction, the watchdogs, a restart, the node or the agent stopping, a fault), before
    any signal. With the default stop mode (`signal`) it does nothing: the signals alone
    stop the pod. With `terminate-client` the MPS clients among the processes (and their
    children) are ended by their server with `terminate_client`, which returns once the
    server is done with them; the signals come after."""
    if mps is None or mps.stop_mode != STOP_TERMINATE_CLIENT:
        return []
    pids = pod_processes(pgids)
    return mps.end_clients(pids) if pids else []
