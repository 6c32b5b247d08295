"""Starting, watching and signalling a container's process group.

Each container run is started in a session (and process group) of its own, under a small
`/bin/sh` wrapper that writes the command's exit code to a file. The file lets an agent that
was restarted learn how a process it did not start (so cannot `wait()` for) ended.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import psutil

from gpushare.agent.runtime import sandbox as sb

# $0 is the exit-code file; "$@" the container's command line. The wrapper waits through a
# SIGTERM sent to the group (a trap, not an ignore, so the command still gets the default
# disposition) and records how the command ended; only SIGKILL stops it first.
_WRAPPER = 'trap ":" TERM INT; "$@"; rc=$?; printf "%s\\n" "$rc" > "$0"; exit "$rc"'

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

    def poll(self) -> int | None:
        """The exit code once the run has ended, else None."""
        if self.popen is not None:
            code = self.popen.poll()
            if code is None:
                return None
            return _from_exit_file(self.exit_file, code)
        if _alive(self.pid, self.create_time):
            return None
        return _from_exit_file(self.exit_file, None)

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
) -> ContainerProcess:
    """Start `argv` with its output appended to `log_file`; with `sandbox`, inside the pod's
    sandbox (the wrapper that records the exit code stays outside, as the agent's user)."""
    if sandbox is None:
        cwd.mkdir(parents=True, exist_ok=True)
    else:
        sb.working_directory(sandbox, cwd)
    if sandbox is not None:
        env = sb.sandbox_env(sandbox, env)
    executable = resolve_executable(argv[0], env, cwd)
    command = [executable, *argv[1:]]
    if sandbox is not None:
        command = sb.launch_argv(sandbox, command, env, cwd)
    exit_file.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        exit_file.unlink()
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as out:
        try:
            popen = subprocess.Popen(
                ["/bin/sh", "-c", _WRAPPER, str(exit_file), *command],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            raise StartError(f"start {argv[0]!r}: {exc}") from exc
    try:
        create_time = psutil.Process(popen.pid).create_time()
    except psutil.NoSuchProcess:
        create_time = 0.0
    return ContainerProcess(
        pid=popen.pid, pgid=popen.pid, create_time=create_time, exit_file=exit_file, popen=popen
    )


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
