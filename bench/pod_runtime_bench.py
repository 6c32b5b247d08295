"""What the agent's pod runtime costs: pods per second from creation through the API to
``Running`` (each pod its cgroups, a network namespace of its own, a log writer, a sleep),
and the agent's resident memory per running pod. The real API server in this process, the
agent as a ``gpushare agent`` process (root: real cgroups, namespaces and nftables). Each
run starts a fresh API server and agent, creates `--pods` pods at once and waits until all
are Running, reads the agent's RSS (and that of the log writers it started), then deletes
them.

    python bench/pod_runtime_bench.py [--pods 50] [--runs 3]

Prints each run, the min and median, the machine's load average and a calibration figure
(the seconds this machine takes for a fixed CPU loop), so numbers of different machines or
moments can be weighed."""

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

import psutil

from gpushare.cli.compose import api_server
from gpushare.kube.client import NODES, PODS, KubeClient

NODE = "bench-node"
NS = "default"


def _wait(check, timeout: float = 300.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise SystemExit("timed out")


def calibration() -> float:
    """Seconds for a fixed pure-Python loop (lower: a faster or idler machine)."""
    started = time.perf_counter()
    total = 0
    for i in range(3_000_000):
        total += i * i % 7
    return time.perf_counter() - started


def _rss(proc: psutil.Process) -> tuple[int, int]:
    """(the agent's RSS, the sum of its log writers' RSS) in bytes."""
    own = proc.memory_info().rss
    shims = sum(c.memory_info().rss for c in proc.children(recursive=True)
                if "logshim" in " ".join(c.cmdline()))
    return own, shims


def one_run(root: Path, pods: int) -> tuple[float, float, float]:
    """(pods/s, agent RSS bytes per running pod, log writer RSS bytes per pod)."""
    server = api_server(root / "api").start()
    kubeconfig = root / "api" / "admin.kubeconfig"
    kube = KubeClient.from_kubeconfig(str(kubeconfig))
    agent = subprocess.Popen(
        [sys.executable, "-m", "gpushare.cli.main", "agent", "--kubeconfig", str(kubeconfig),
         "--node-name", NODE, "--gpus", "1xH100", "--data-dir", str(root / "agent"),
         "--heartbeat", "1", "--pod-network", "isolated", "--metrics-interval", "0"],
        stdout=open(root / "agent.log", "ab"), stderr=subprocess.STDOUT)  # noqa: SIM115
    proc = psutil.Process(agent.pid)
    try:
        _wait(lambda: any(c.get("type") == "Ready" and c.get("status") == "True" for c in (
            (kube.get(NODES.item(NODE)) or {}).get("status") or {}).get("conditions") or []))
        time.sleep(1.0)
        idle, _ = _rss(proc)
        started = time.perf_counter()
        for i in range(pods):
            kube.create(PODS.collection(NS), {
                "metadata": {"name": f"p{i}", "namespace": NS},
                "spec": {"nodeName": NODE, "restartPolicy": "Never",
                         "terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "main", "image": "none",
                                         "command": ["sleep", "3600"],
                                         "resources": {"limits": {"memory": "64Mi"}}}]}})

        def all_running() -> bool:
            items = kube.list(PODS.collection(NS))["items"]
            return sum((p.get("status") or {}).get("phase") == "Running"
                       for p in items) == pods
        _wait(all_running)
        elapsed = time.perf_counter() - started
        time.sleep(1.0)
        busy, shims = _rss(proc)
        for i in range(pods):
            kube.delete(PODS.item(f"p{i}", NS))
        _wait(lambda: not kube.list(PODS.collection(NS))["items"])
        return pods / elapsed, (busy - idle) / pods, shims / pods
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(60)
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (cgroups, network namespaces, nftables)")
    print(f"load average before: {os.getloadavg()}; cpus: {os.cpu_count()}; "
          f"calibration (3M-step Python loop): {calibration():.3f} s")
    rates, agent_kib, shim_kib = [], [], []
    for run in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="pod-runtime-bench-") as tmp:
            rate, per_pod, shims = one_run(Path(tmp), args.pods)
        rates.append(rate)
        agent_kib.append(per_pod / 1024)
        shim_kib.append(shims / 1024)
        print(f"run {run + 1}: {args.pods} pods: {rate:.2f} pods/s create→Running; agent RSS "
              f"+{per_pod / 1024:.0f} KiB per running pod; log writer RSS "
              f"{shims / 1024:.0f} KiB per pod")
    print(f"pods/s: min {min(rates):.2f} median {statistics.median(rates):.2f}")
    print(f"agent RSS per running pod (KiB): min {min(agent_kib):.0f} "
          f"median {statistics.median(agent_kib):.0f}")
    print(f"log writer RSS per pod (KiB): min {min(shim_kib):.0f} "
          f"median {statistics.median(shim_kib):.0f}")
    print(f"load average after: {os.getloadavg()}; calibration: {calibration():.3f} s")


if __name__ == "__main__":
    main()
