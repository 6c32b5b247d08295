"""What the pod network costs a pod start: from the pod's creation through the API to its
``Running`` status, with the agent's ``--pod-network host`` (the node's network, as before)
and ``isolated`` (a namespace, a veth and the node's rules per pod), in one run on one
machine. The real API server in this process, the agent as a ``gpushare agent`` process
(root: real namespaces and nftables). Pods are created one after another, each deleted once
Running; the same command (``sleep``) each time.

    python bench/pod_network_bench.py [--pods 40]

Prints p50/p99/max per mode, the ratio isolated/host and the machine's load average."""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpushare.cli.compose import api_server
from gpushare.kube.client import NODES, PODS, KubeClient

NODE = "bench-node"
NS = "default"


def _wait(check, timeout: float = 60.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.01)
    raise SystemExit("timed out")


def run_mode(root: Path, mode: str, pods: int) -> list[float]:
    server = api_server(root / mode / "api").start()
    kubeconfig = root / mode / "api" / "admin.kubeconfig"
    kube = KubeClient.from_kubeconfig(str(kubeconfig))
    agent = subprocess.Popen(
        [sys.executable, "-m", "gpushare.cli.main", "agent", "--kubeconfig", str(kubeconfig),
         "--node-name", NODE, "--gpus", "1xH100", "--data-dir", str(root / mode / "agent"),
         "--heartbeat", "0.5", "--pod-network", mode, "--metrics-interval", "0"],
        stdout=open(root / f"{mode}.log", "ab"), stderr=subprocess.STDOUT)  # noqa: SIM115
    try:
        _wait(lambda: any(c.get("type") == "Ready" and c.get("status") == "True" for c in (
            (kube.get(NODES.item(NODE)) or {}).get("status") or {}).get("conditions") or []))
        times = []
        for i in range(pods):
            name = f"p{i}"
            body = {"metadata": {"name": name, "namespace": NS},
                    "spec": {"nodeName": NODE, "restartPolicy": "Never",
                             "terminationGracePeriodSeconds": 1,
                             "containers": [{"name": "main", "image": "none",
                                             "command": ["sleep", "3600"]}]}}
            started = time.perf_counter()
            kube.create(PODS.collection(NS), body)
            _wait(lambda n=name: ((kube.get(PODS.item(n, NS)) or {}).get("status") or {}).get(
                "phase") == "Running")
            times.append(time.perf_counter() - started)
            kube.delete(PODS.item(name, NS))
            _wait(lambda n=name: kube.get(PODS.item(n, NS)) is None)
        return times
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(60)
        server.stop()


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=40)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (network namespaces, nftables)")
    print(f"load average before: {os.getloadavg()}")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("host", "isolated"):
            results[mode] = run_mode(Path(tmp), mode, args.pods)
    for mode, times in results.items():
        print(f"{mode:9s} pods={len(times)} p50={_pct(times, 0.5) * 1000:.0f} ms "
              f"p99={_pct(times, 0.99) * 1000:.0f} ms max={max(times) * 1000:.0f} ms "
              f"mean={statistics.mean(times) * 1000:.0f} ms")
    ratio = _pct(results["isolated"], 0.5) / _pct(results["host"], 0.5)
    print(f"isolated/host p50 ratio: {ratio:.2f}")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
