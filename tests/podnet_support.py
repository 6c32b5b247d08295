"""A cluster for the pod network's tests: the real API server and controllers in this
process, the agent as a `gpushare agent` process (root here: real network namespaces, veths,
nftables), `/usr/bin/kubectl` for exec and port-forward. Tenants' pods stand in host
namespaces ``vc-<tenant>`` as the syncer makes them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from gpushare.cli.compose import api_server
from gpushare.kube.client import NAMESPACES, NODES, PODS, KubeClient

NODE = "net-node"
KUBECTL = "/usr/bin/kubectl"
PY = sys.executable
SERVE = [PY, "-m", "http.server", "8080"]
SLEEP = [PY, "-c", "import time; time.sleep(100000)"]


def wait_for(check: Any, timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what} not reached in {timeout} s")


class Net:
    def __init__(self, root: Path, cidr: str, mode: str = "auto") -> None:
        from gpushare.controller_manager import start_controllers

        self.root = root
        self.cidr = cidr
        self.gateway = cidr.replace("0/24", "1")
        self.bridge = "gpushare" + cidr.split(".")[2]
        self.server = api_server(root / "api").start()
        self.kubeconfig = root / "api" / "admin.kubeconfig"
        self.kube = KubeClient.from_kubeconfig(str(self.kubeconfig))
        self.controllers = start_controllers(str(self.kubeconfig))
        self.agent = subprocess.Popen(
            [PY, "-m", "gpushare.cli.main", "agent", "--kubeconfig", str(self.kubeconfig),
             "--node-name", NODE, "--gpus", "1xH100", "--data-dir", str(root / "agent"),
             "--heartbeat", "0.5", "--restart-backoff", "0.2", "--pod-cidr", cidr,
             "--pod-network", mode],
            stdout=open(root / "agent.log", "ab"), stderr=subprocess.STDOUT)  # noqa: SIM115
        wait_for(lambda: self._ready(), 60, "the node Ready")
        for tenant in ("nlp", "vision"):
            self.kube.create(NAMESPACES.collection(), {"metadata": {
                "name": f"vc-{tenant}", "labels": {"tenancy.gpushare.io/tenant": tenant}}})

    def _ready(self) -> bool:
        node = self.kube.get(NODES.item(NODE))
        return any(c.get("type") == "Ready" and c.get("status") == "True"
                   for c in ((node or {}).get("status") or {}).get("conditions") or [])

    def stop(self) -> None:
        self.agent.send_signal(signal.SIGTERM)
        self.agent.wait(60)
        self.controllers.stop()
        self.server.stop()

    def kubectl(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig))
        return subprocess.run([KUBECTL, *args], env=env, capture_output=True, text=True,
                              timeout=timeout, check=False)

    def pod(self, namespace: str, name: str, command: list[str], **spec: Any) -> None:
        container = {"name": "main", "image": "busybox", "command": command,
                     "ports": [{"name": "http", "containerPort": 8080}]}
        body = {"metadata": {"name": name, "namespace": namespace,
                             "labels": spec.pop("labels", {})},
                "spec": {"nodeName": NODE, "restartPolicy": "Never",
                         "terminationGracePeriodSeconds": 2, "containers": [container],
                         **spec}}
        self.kube.create(PODS.collection(namespace), body)

    def running(self, namespace: str, name: str) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            pod = self.kube.get(PODS.item(name, namespace)) or {}
            status = pod.get("status") or {}
            return pod if status.get("phase") == "Running" and status.get("podIP") else None
        return wait_for(check, 60, f"{namespace}/{name} Running")  # type: ignore[no-any-return]

    def in_pod(self, namespace: str, name: str, code: str) -> str:
        done = self.kubectl("exec", "-n", namespace, name, "--", PY, "-c", code, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()


CONNECT = ("import socket\ntry:\n    socket.create_connection(({host!r}, {port}), timeout=2)\n"
           "    print('connected')\nexcept OSError as e:\n    print(type(e).__name__)")
RESOLVE = ("import socket\ntry:\n    print(socket.gethostbyname({name!r}))\n"
           "except OSError as e:\n    print(type(e).__name__)")
FETCH = ("import urllib.request\n"
         "print(urllib.request.urlopen({url!r}, timeout=5).status)")




def serving(ip: str) -> bool:
    try:
        return urllib.request.urlopen(f"http://{ip}:8080/", timeout=2).status == 200
    except OSError:
        return False
