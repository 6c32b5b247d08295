"""Attack: `gpushare up` dies (kill -9, the OOM killer) and somebody else takes its port.

Its children hold the platform's credentials (the controllers' token, the agent's node
identity) and would keep reconnecting to whoever listens on the API port next, handing
each connection their token. They must stop when `gpushare up` dies, the agent ending its
pods; and what listens on the port is never sent a token unless it holds the API server's
certificate (the cluster CA pinned by every kubeconfig).
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

import psutil
import yaml
from tenancy_support import Platform, pod_manifest, start_platform
from tls_listener import Listener

from waiting import wait_for


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _tokens(data: Path) -> list[bytes]:
    entries = yaml.safe_load((data / "tokens.yaml").read_text()) or {}
    found: list[bytes] = []
    for entry in entries.get("tokens") or entries if isinstance(entries, list) else \
            entries.get("tokens") or []:
        token = entry.get("token") if isinstance(entry, dict) else None
        if token:
            found.append(str(token).encode())
    return found


def _pod_process(platform: Platform, marker: str) -> psutil.Process:
    def find() -> psutil.Process | None:
        for process in psutil.process_iter(["cmdline"]):
            if marker in " ".join(process.info["cmdline"] or ()) and \
                    "kubectl" not in " ".join(process.info["cmdline"] or ()):
                return process
        return None
    return wait_for(find, 60, "the pod's process running")


def test_children_stop_with_gpushare_up_and_give_an_impostor_nothing(tmp_path: Path) -> None:
    platform = start_platform(tmp_path / "data")
    marker = f"orphan-marker-{uuid.uuid4().hex}"  # this run's pod, no other
    try:
        server = yaml.safe_load((platform.data / "admin.kubeconfig").read_text())
        port = int(server["clusters"][0]["cluster"]["server"].rsplit(":", 1)[1])
        up = psutil.Process(platform.proc.pid)
        children = up.children()
        assert {"agent", "controllers"} <= {" ".join(c.cmdline()).split(" -m gpushare.cli.main ")
                                            [-1].split()[0] for c in children}, children
        platform.host.apply(QUEUE)
        platform.host.apply(pod_manifest("lingering", queue="solo", command=(
            f"import time; print('{marker}', flush=True); time.sleep(3600)  # {marker}")))
        pod = _pod_process(platform, marker)
        tokens = _tokens(platform.data)
        assert tokens, "tokens.yaml lists no token"
        os.kill(platform.proc.pid, signal.SIGKILL)
        platform.proc.wait(10)
        # somebody takes the port at once, with a certificate a node holds
        pki = platform.data / "agent" / "pki"
        deadline = time.monotonic() + 10
        while True:
            try:
                impostor = Listener(pki / "node.crt", pki / "node.key", port)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        try:
            wait_for(lambda: not any(_alive(c) for c in children), 60,
                     "the children of the killed gpushare up to stop")
            wait_for(lambda: not _alive(pod), 60, "the pod's process to stop")
            time.sleep(2)
        finally:
            impostor.close()
        leaked = [data[:80] for data in impostor.received
                  if any(token in data for token in tokens)]
        assert not leaked, f"a child handed its token to the impostor: {leaked}"
    finally:
        for process in psutil.process_iter(["cmdline"]):  # what a failed run left behind
            cmdline = " ".join(process.info["cmdline"] or ())
            if marker in cmdline or str(tmp_path) in cmdline:
                process.kill()
        platform.stop()


QUEUE = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: solo}
spec:
  resources:
    gpu: {quota: 1, limit: -1, overQuotaWeight: 1}
    cpu: {quota: -1, limit: -1, overQuotaWeight: 1}
    memory: {quota: -1, limit: -1, overQuotaWeight: 1}
"""
