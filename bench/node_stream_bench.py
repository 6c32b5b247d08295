"""What the node link costs: `kubectl exec`, `kubectl cp` and `kubectl port-forward` through
the embedded API server to a `gpushare agent` process (HTTPS, the API server's client
certificate, WebSocket relay), against the same work done locally.

It starts the API server in this process and the agent as a process with declared GPUs, runs
two pods, then measures, each --runs times: a `kubectl exec POD -- true` round trip (and a
local `sh -c true` and a `kubectl get --raw /version` for the floors), `kubectl cp` of a
--megabytes file into the pod and back, and one HTTP download of that file from a
`python -m http.server` pod, directly and through `kubectl port-forward`. It prints sizes,
min and median, the throughput and the machine's load (`os.getloadavg()`).

    python bench/node_stream_bench.py --runs 10 --megabytes 32
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from gpushare.cli.compose import api_server
from gpushare.kube.client import NODES, PODS, KubeClient
from gpushare.tools import find_tool

KUBECTL = find_tool("kubectl") or "kubectl"  # the environment's kubectl wheel, else PATH
NODE = "bench-node"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(check: Callable[[], object], timeout: float, what: str) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise SystemExit(f"timed out waiting for {what}")


def _timed(action: Callable[[], None], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return times


def _report(name: str, times: list[float], size_mb: float | None = None) -> None:
    line = f"{name:<34} min {min(times) * 1000:8.1f} ms   median " \
           f"{statistics.median(times) * 1000:8.1f} ms"
    if size_mb:
        line += f"   {size_mb / statistics.median(times):7.1f} MB/s at the median"
    print(line, flush=True)


def _run_pod(kube: KubeClient, name: str, command: list[str]) -> None:
    kube.create(PODS.collection("default"), {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": NODE, "restartPolicy": "Never",
                 "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "main", "image": "busybox", "command": command}]}})
    _wait(lambda: ((kube.get(PODS.item(name, "default")) or {}).get("status") or {})
          .get("phase") == "Running", 30, f"pod {name} running")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--megabytes", type=int, default=32)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="node-stream-bench-"))
    server = api_server(root / "api").start()
    kubeconfig = root / "api" / "admin.kubeconfig"
    kube = KubeClient.from_kubeconfig(str(kubeconfig))
    agent = subprocess.Popen(
        [sys.executable, "-m", "gpushare.cli.main", "agent", "--kubeconfig", str(kubeconfig),
         "--node-name", NODE, "--gpus", "1xH100", "--data-dir", str(root / "agent"),
         "--stop-pods-on-exit"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def kubectl(*argv: str) -> None:
        subprocess.run([KUBECTL, "--kubeconfig", str(kubeconfig), *argv], check=True,
                       capture_output=True, timeout=300)

    try:
        _wait(lambda: kube.get(NODES.item(NODE)), 30, "the agent's node")
        _run_pod(kube, "shell", ["sleep", "3600"])
        port = _free_port()
        _run_pod(kube, "web", [sys.executable, "-m", "http.server", str(port), "--bind",
                               "127.0.0.1"])
        payload = root / "payload.bin"
        payload.write_bytes(os.urandom(args.megabytes << 20))
        print(f"runs {args.runs}, file {args.megabytes} MiB, cpus {os.cpu_count()}, "
              f"load before {os.getloadavg()[0]:.2f}", flush=True)
        _report("local sh -c true", _timed(
            lambda: subprocess.run(["sh", "-c", "true"], check=True), args.runs))
        _report("kubectl get --raw /version", _timed(
            lambda: kubectl("get", "--raw", "/version"), args.runs))
        _report("kubectl exec -- true", _timed(
            lambda: kubectl("exec", "shell", "--", "true"), args.runs))
        size = args.megabytes * 1.048576
        _report("kubectl cp (into the pod)", _timed(
            lambda: kubectl("cp", str(payload), "default/shell:payload.bin"), args.runs), size)
        back = root / "back.bin"
        _report("kubectl cp (out of the pod)", _timed(
            lambda: kubectl("cp", "default/shell:payload.bin", str(back)), args.runs), size)
        assert back.read_bytes() == payload.read_bytes()
        kubectl("cp", str(payload), "default/web:payload.bin")
        local = _free_port()
        forward = subprocess.Popen([KUBECTL, "--kubeconfig", str(kubeconfig), "port-forward",
                                    "pod/web", f"{local}:{port}"], stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL)
        try:
            assert forward.stdout is not None
            forward.stdout.readline()

            def fetch(url: str) -> None:
                with urllib.request.urlopen(url, timeout=120) as answer:
                    assert len(answer.read()) == args.megabytes << 20

            _report("direct HTTP download", _timed(
                lambda: fetch(f"http://127.0.0.1:{port}/payload.bin"), args.runs), size)
            _report("port-forward HTTP download", _timed(
                lambda: fetch(f"http://127.0.0.1:{local}/payload.bin"), args.runs), size)
        finally:
            forward.send_signal(signal.SIGINT)
            forward.wait(10)
        print(f"load after {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(30)
        kube.close()
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
