"""End-to-end helpers: the API server as a process, kubectl, polling, static nodes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpushare.tools import find_tool
from waiting import wait_for  # noqa: F401  (re-exported for the tests)

KUBECTL = find_tool("kubectl") or "kubectl"  # the environment's kubectl wheel, else PATH
SERVE = Path(__file__).with_name("serve.py")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ServerProcess:
    data_dir: Path
    port: int
    kubeconfig: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> None:
        log = (self.data_dir.parent / "server.log").open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVE), str(self.data_dir), str(self.port), str(self.kubeconfig)],
            stdout=subprocess.PIPE, stderr=log,
        )
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        line = b""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.strip() == b"ready" or not line:
                break
        if line.strip() != b"ready":
            self.proc.kill()
            raise RuntimeError(f"API server did not start; see {self.data_dir.parent}/server.log")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


class Kubectl:
    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig

    def run(self, *args: str, stdin: str | None = None, check: bool = True
            ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [KUBECTL, "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin, capture_output=True, text=True, timeout=60,
            env={**os.environ, "KUBECTL_INTERACTIVE_DELETE": "false"},
        )
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {done.stderr}")
        return done

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "-o", "json").stdout)


def add_node(kubeconfig: Path, name: str, gpus: str, *extra: str, tainted: bool = False
             ) -> None:
    """``gpushare node add`` as a user runs it; untainted (``--no-taint``) so that these
    tests' pods may be bound there without a toleration, unless ``tainted``."""
    done = subprocess.run(
        [sys.executable, "-m", "gpushare.cli.main", "node", "add", name, "--gpus", gpus,
         "--kubeconfig", str(kubeconfig), *([] if tainted else ["--no-taint"]), *extra],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr


def team_queue(gpu_quota: str = "1", unlimited_cpu_memory: bool = False) -> str:
    """A top-level queue `team` (limit unlimited), as the placement tests apply it."""
    extra = ("    cpu: {quota: -1, limit: -1, overQuotaWeight: 1}\n"
             "    memory: {quota: -1, limit: -1, overQuotaWeight: 1}\n"
             if unlimited_cpu_memory else "")
    return ("apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: team}\nspec:\n"
            "  resources:\n"
            f"    gpu: {{quota: {gpu_quota}, limit: -1, overQuotaWeight: 1}}\n{extra}")


def fraction_pod(name: str, fraction: str, spec: str = "", labels: str = "") -> str:
    """A pod of queue `team` asking for `fraction` of a GPU, sleeping; `spec` is extra
    two-space-indented lines of its spec (tolerations, affinity), `labels` extra labels."""
    return f"""
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
  labels: {{kai.scheduler/queue: team{labels}}}
  annotations: {{gpu-fraction: "{fraction}"}}
spec:
  schedulerName: gpushare
{spec}  containers:
  - {{name: main, image: busybox, command: ["sleep", "3600"]}}
"""
