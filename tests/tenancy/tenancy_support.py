"""Tenancy test helpers: `gpushare up` as a process, tenants made with the CLI, kubectl
with each tenant's own kubeconfig."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpushare.tools import find_tool
from waiting import wait_for

KUBECTL = find_tool("kubectl") or "kubectl"  # the environment's kubectl wheel, else PATH
GPUSHARE = [sys.executable, "-m", "gpushare.cli.main"]

QUEUES = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: ml-org}
spec:
  resources:
    gpu: {quota: %(gpus)s, limit: %(gpus)s, overQuotaWeight: 1}
    cpu: {quota: -1, limit: -1, overQuotaWeight: 1}
    memory: {quota: -1, limit: -1, overQuotaWeight: 1}
""" + "".join(f"""---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {{name: {team}}}
spec:
  parentQueue: ml-org
  resources:
    gpu: {{quota: %(quota)s, limit: -1, overQuotaWeight: 1}}
    cpu: {{quota: -1, limit: -1, overQuotaWeight: 1}}
    memory: {{quota: -1, limit: -1, overQuotaWeight: 1}}
""" for team in ("nlp", "vision", "recsys"))


@dataclass
class Kubectl:
    kubeconfig: Path

    def run(self, *args: str, stdin: str | None = None, check: bool = True
            ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([KUBECTL, "--kubeconfig", str(self.kubeconfig), *args],
                              input=stdin, capture_output=True, text=True, timeout=60,
                              env={**os.environ, "KUBECTL_INTERACTIVE_DELETE": "false"})
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {done.stderr}")
        return done

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "-o", "json").stdout)

    def apply(self, text: str) -> subprocess.CompletedProcess[str]:
        return self.run("apply", "-f", "-", stdin=text)


@dataclass
class Platform:
    data: Path
    proc: subprocess.Popen[str]
    host: Kubectl = field(init=False)

    def __post_init__(self) -> None:
        self.host = Kubectl(self.data / "admin.kubeconfig")

    def gpushare(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([*GPUSHARE, *args], capture_output=True, text=True, timeout=120)
        if check and done.returncode != 0:
            raise AssertionError(f"gpushare {' '.join(args)} failed: {done.stdout}"
                                 f"{done.stderr}")
        return done

    def tenant(self, name: str, *args: str) -> Kubectl:
        self.gpushare("tenant", "create", name, "--data-dir", str(self.data), *args)
        return Kubectl(self.data / "tenants" / f"{name}.kubeconfig")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def start_platform(data: Path, gpus: str = "1xL40S", node: str = "box") -> Platform:
    log = (data.parent / "up.log").open("w")
    proc = subprocess.Popen([*GPUSHARE, "up", "--data-dir", str(data), "--port", "0",
                             "--gpus", gpus, "--node-name", node],
                            stdout=log, stderr=subprocess.STDOUT, text=True)
    platform = Platform(data, proc)
    kubeconfig = data / "admin.kubeconfig"

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"gpushare up exited: {(data.parent / 'up.log').read_text()}")
        if not kubeconfig.exists():
            return False
        done = platform.host.run("get", "node", node, "-o",
                                 "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
                                 check=False)
        return done.stdout == "True"

    try:
        wait_for(ready, 90, "the node Ready")
    except BaseException:
        platform.stop()
        raise
    return platform


def pod_manifest(name: str, *, queue: str | None = None, fraction: str = "0.33",
                 command: str = "import time; print('hello from', __name__, flush=True); "
                                "time.sleep(3600)", extra_labels: str = "") -> str:
    labels = f"kai.scheduler/queue: {queue}, " if queue else ""
    return f"""
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
  labels: {{{labels}team: x{extra_labels}}}
  annotations: {{gpu-fraction: "{fraction}"}}
spec:
  schedulerName: gpushare
  restartPolicy: Never
  containers:
  - name: train
    image: python
    command: ["python3", "-c", {json.dumps(command)}]
"""
