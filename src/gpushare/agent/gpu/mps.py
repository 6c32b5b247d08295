"""CUDA MPS: one control daemon per GPU, started, watched and stopped by the agent.

Each GPU gets its own pipe and log directory under the agent's data dir, and its daemon sees
only that GPU (`CUDA_VISIBLE_DEVICES=<uuid>`), so a fatal fault in one GPU's clients does not
stop the others. Clients reach a daemon through `CUDA_MPS_PIPE_DIRECTORY`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpushare.agent.node.inventory import GpuDevice

CONTROL = "nvidia-cuda-mps-control"

# (argv, env, stdin) -> (returncode, output); replaced in tests
CommandRunner = Callable[[list[str], dict[str, str], str | None], tuple[int, str]]


def run_command(argv: list[str], env: dict[str, str], stdin: str | None) -> tuple[int, str]:
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
            timeout=20 if daemonize else 5,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)
    return done.returncode, done.stdout or ""


@dataclass(slots=True)
class MpsDaemon:
    device: GpuDevice
    base: Path
    binary: str
    runner: CommandRunner
    restarts: int = 0

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
        return True, output.strip()

    def quit(self) -> None:
        if (self.pipe_directory / "control").exists():
            self.control("quit")


class MpsManager:
    """The per-GPU daemons; `supervise()` restarts any that died."""

    def __init__(
        self,
        devices: tuple[GpuDevice, ...],
        base: Path,
        binary: str | None = None,
        runner: CommandRunner = run_command,
    ) -> None:
        found = binary or shutil.which(CONTROL) or CONTROL
        self.daemons = {d.index: MpsDaemon(d, base, found, runner) for d in devices}
        self._lock = threading.Lock()

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

    def pipe_directory(self, index: int) -> str | None:
        daemon = self.daemons.get(index)
        return str(daemon.pipe_directory) if daemon is not None else None

    def stop_all(self) -> None:
        for daemon in self.daemons.values():
            daemon.quit()
