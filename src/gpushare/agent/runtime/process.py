"""Starting, watching and signalling a container's process group.

Each container run is started in a session (and process group) of its own, under a small
`/bin/sh` wrapper that writes the command's exit code to a file. The file lets an agent that
was restarted learn how a process it did not start (so cannot `wait()` for) ended.

Before it starts the command, the wrapper writes its own pid into the ``cgroup.procs`` files
it is given (the container's cgroups), so the command and everything it forks are limited
from their first instruction. Its stdout and stderr are a pipe read by the run's log writer
(`runtime.logshim`), which writes and rotates the log file.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil

from gpushare.agent.runtime import sandbox as sb
from gpushare.agent.runtime.logshim import LogLimits
from gpushare.agent.runtime.stdio import ChildStdio

# $0 is the exit-code file; then the cgroup.procs files to join, "--", and the container's
# command line. The wrapper joins the cgroups (a run that cannot join them does not start:
# exit 125), waits through a SIGTERM sent to the group (a trap, not an ignore, so the
# command still gets the default disposition) and records how the command ended; only
# SIGKILL stops it first.
_WRAPPER = ('trap ":" TERM INT; while [ "$1" != "--" ]; do printf "%s\\n" "$$" > "$1" '
            '|| exit 125; shift; done; shift; '
            '"$@"; rc=$?; printf "%s\\n" "$rc" > "$0"; exit "$rc"')
CGROUP_JOIN_FAILED = 125
_SESSION = (shutil.which("setsid", path="/usr/bin:/bin") or "setsid", "--ctty", "--wait")
SHIM_DRAIN_S = 1.0  # how long a finished run waits for its log writer to read the rest

UNKNOWN_EXIT = 137  # what the kubelet reports for a container whose end it did not see


class StartError(RuntimeError):
    """The command could not be started (not found, not executable, bad directory)."""


@dataclass(slots=True)
class ContainerProcess:
    pid: int
    pgid: int
    create_time: float
    exit_file: Path
    popen: subprocess.Popen[bytes] | None  # None when adopted after an agent restart
    shim: subprocess.Popen[bytes] | None = None  # the run's log writer

    def poll(self) -> int | None:
        """The exit code once the run has ended, else None (its log written out first)."""
        if self.popen is not None:
            code = self.popen.poll()
            if code is None:
                return None
            self._drain()
            return _from_exit_file(self.exit_file, code)
        if _alive(self.pid, self.create_time):
            return None
        return _from_exit_file(self.exit_file, None)

    def _drain(self) -> None:
        """Give the log writer a moment to write what the run wrote last (it ends once
        nothing holds the pipe; a child the run left behind may keep it open longer)."""
        if self.shim is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.shim.wait(SHIM_DRAIN_S)

    def group_alive(self) -> bool:
        return bool(group_members(self.pgid))

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, sig)

    def state(self) -> dict[str, object]:
        return {
            "pid": self.pid,
            "pgid": self.pgid,
            "createTime": self.create_time,
            "exitFile": str(self.exit_file),
        }


def _alive(pid: int, create_time: float) -> bool:
    try:
        proc = psutil.Process(pid)
        return (
            abs(proc.create_time() - create_time) < 0.05 and proc.status() != psutil.STATUS_ZOMBIE
        )
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _from_exit_file(path: Path, waited: int | None) -> int:
    try:
        text = path.read_text().strip()
        if text.isdigit():
            return int(text)
    except OSError:
        pass
    if waited is None:
        return UNKNOWN_EXIT
    # killed by a signal before the wrapper could write: shells report 128 + signal
    return 128 - waited if waited < 0 else waited


def group_members(pgid: int) -> list[int]:
    members = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.info["pid"]) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                members.append(proc.info["pid"])
        except (ProcessLookupError, psutil.NoSuchProcess, PermissionError, psutil.AccessDenied):
            continue
    return members


def resolve_executable(argv0: str, env: dict[str, str], cwd: Path) -> str:
    if "/" in argv0:
        candidate = Path(argv0) if argv0.startswith("/") else cwd / argv0
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
        raise StartError(f'exec: "{argv0}": no such executable file')
    found = shutil.which(argv0, path=env.get("PATH", os.defpath))
    if found is None:
        raise StartError(f'exec: "{argv0}": executable file not found in $PATH')
    return found


def start(
    argv: tuple[str, ...],
    env: dict[str, str],
    cwd: Path,
    log_file: Path,
    exit_file: Path,
    sandbox: sb.SandboxState | None = None,
    cgroup_procs: tuple[str, ...] = (),
    log_limits: LogLimits | None = None,
    stdio: ChildStdio | None = None,
) -> ContainerProcess:
    """Start `argv` in the cgroups whose ``cgroup.procs`` are `cgroup_procs`, its output
    written to `log_file` by a log writer of its own; with `sandbox`, inside the pod's
    sandbox (the wrapper that records the exit code stays outside, as the agent's user);
    with `stdio`, on its stdin pipe or terminal (`runtime.stdio`)."""
    stdio = stdio or ChildStdio(None, None, None, None)
    try:
        return _start(argv, env, cwd, log_file, exit_file, sandbox, cgroup_procs,
                      log_limits or LogLimits(), stdio)
    except BaseException:
        if stdio.handle is not None:
            stdio.handle.close()
        raise
    finally:
        stdio.close_child_ends()


def _start(argv: tuple[str, ...], env: dict[str, str], cwd: Path, log_file: Path,
           exit_file: Path, sandbox: sb.SandboxState | None, cgroup_procs: tuple[str, ...],
           log_limits: LogLimits, stdio: ChildStdio) -> ContainerProcess:
    if sandbox is None:
        cwd.mkdir(parents=True, exist_ok=True)
    else:
        sb.working_directory(sandbox, cwd)
    if sandbox is not None:
        env = sb.sandbox_env(sandbox, env)
    executable = resolve_executable(argv[0], env, cwd)
    inner = [executable, *argv[1:]]
    command = inner if sandbox is None else sb.launch_argv(sandbox, inner, env, cwd)
    if stdio.terminal is not None:
        # the command (inside the sandbox: in its PID namespace) leads a session whose
        # controlling terminal is the pty, as a container runtime's init does; a shell's
        # job control then finds its process groups
        command = [*command[:len(command) - len(inner)], *_SESSION, *inner]
    exit_file.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        exit_file.unlink()
    log_file.parent.mkdir(parents=True, exist_ok=True)
    shim, write_end = start_log_writer(log_file, log_limits, stdio.log_source)
    terminal = stdio.terminal
    try:
        popen = subprocess.Popen(
            ["/bin/sh", "-c", _WRAPPER, str(exit_file), *cgroup_procs, "--", *command],
            stdin=terminal if terminal is not None else (
                stdio.stdin if stdio.stdin is not None else subprocess.DEVNULL),
            stdout=terminal if terminal is not None else write_end,
            stderr=terminal if terminal is not None else subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:
        raise StartError(f"start {argv[0]!r}: {exc}") from exc
    finally:
        if write_end is not None:
            os.close(write_end)
    try:
        create_time = psutil.Process(popen.pid).create_time()
    except psutil.NoSuchProcess:
        create_time = 0.0
    return ContainerProcess(
        pid=popen.pid, pgid=popen.pid, create_time=create_time, exit_file=exit_file, popen=popen,
        shim=shim,
    )


def start_log_writer(log_file: Path, limits: LogLimits, source: int | None = None
                     ) -> tuple[subprocess.Popen[bytes], int | None]:
    """The run's log writer (a session of its own, so that signals to the run's group do
    not reach it) and the write end of its pipe, for the run's stdout and stderr; with
    `source` (a terminal's master), it reads that instead and there is no pipe."""
    if source is not None:
        read_end, write_end = os.dup(source), None
    else:
        read_end, write_end = os.pipe()
    try:
        shim = subprocess.Popen(
            [sys.executable, "-m", "gpushare.agent.runtime.logshim", str(log_file),
             "--max-size", str(limits.max_size), "--max-files", str(limits.max_files)],
            stdin=read_end, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env=_shim_env(), start_new_session=True, close_fds=True)
    except OSError as exc:
        if write_end is not None:
            os.close(write_end)
        raise StartError(f"start the log writer: {exc}") from exc
    finally:
        os.close(read_end)
    return shim, write_end


def _shim_env() -> dict[str, str]:
    """The agent's own import path, so the log writer is the agent's code."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


def adopt(state: dict[str, object]) -> ContainerProcess:
    return ContainerProcess(
        pid=int(state["pid"]),  # type: ignore[call-overload]
        pgid=int(state["pgid"]),  # type: ignore[call-overload]
        create_time=float(state["createTime"]),  # type: ignore[arg-type]
        exit_file=Path(str(state["exitFile"])),
        popen=None,
    )


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
