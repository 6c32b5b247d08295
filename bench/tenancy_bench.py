"""Virtual clusters: sync latency under steady load, and the API server's memory per idle
tenant.

    python bench/tenancy_bench.py [--tenants 50] [--busy 10] [--rate 50] [--seconds 10]

The API server runs as its own process (`gpushare apiserver`), so its RSS is its own; the
tenancy controller (`gpushare controllers --only tenancy`: the syncers and each tenant's
workload controllers) runs in this process. No scheduler runs: this process plays it,
binding each host pod as soon as its watch shows it, so both directions are measured alone.

1. memory: server RSS before and after `--tenants` VirtualClusters are Ready and idle
   (each with its host namespace, its provisioned objects and the syncer's watches);
2. latency: `--rate` pods/s spread over `--busy` tenants for `--seconds`:
   * to host: tenant pod create sent → host pod seen on a host watch;
   * to tenant: host binding sent → tenant pod seen with `spec.nodeName` on the
     tenant's watch.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

from gpushare.controller_manager import start_controllers
from gpushare.controllers.nodes.static_nodes import register_static_node, static_node
from gpushare.kube.client import PODS, KubeClient
from gpushare.simulator.plots import check_path, line_plot
from gpushare.tenancy.controller import VIRTUALCLUSTERS, tenant_client


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_server(data: Path, sync: str) -> subprocess.Popen[bytes]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gpushare.cli.main", "apiserver",
                             "--data-dir", str(data), "--port", str(port), "--sync", sync],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kubeconfig = data / "admin.kubeconfig"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if kubeconfig.exists():
            try:
                client = KubeClient.from_kubeconfig(str(kubeconfig))
                client.list("/api/v1/namespaces")
                client.close()
                return proc
            except Exception:
                pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the API server did not start")


def _rss_mib(proc: subprocess.Popen[bytes]) -> float:
    return psutil.Process(proc.pid).memory_info().rss / 2**20


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _wait_ready(host: KubeClient, names: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    pending = set(names)
    while pending and time.monotonic() < deadline:
        for vc in host.list(VIRTUALCLUSTERS.collection()).get("items") or ():
            if (vc.get("status") or {}).get("phase") in ("Ready", "Pending"):
                pending.discard(vc["metadata"]["name"])
        time.sleep(0.5)
    if pending:
        raise RuntimeError(f"not provisioned in {timeout:.0f}s: {sorted(pending)[:5]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--tenants", type=int, default=50)
    parser.add_argument("--busy", type=int, default=10)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--sync", choices=("full", "normal"), default="full",
                        help="the API server's SQLite durability (see gpushare apiserver)")
    parser.add_argument("--plot", type=Path, default=None,
                        help="also draw the two latency distributions into this .png or .svg")
    args = parser.parse_args()
    if args.plot is not None:
        check_path(args.plot)
    print(f"load average before: {os.getloadavg()}; --sync {args.sync}")
    with tempfile.TemporaryDirectory(prefix="tenancy-bench-") as tmp:
        data = Path(tmp) / "data"
        server = _start_server(data, args.sync)
        kubeconfig = str(data / "admin.kubeconfig")
        host = KubeClient.from_kubeconfig(kubeconfig)
        running = start_controllers(kubeconfig, enabled=("tenancy",))
        try:
            register_static_node(host, static_node("box", "8xH100", "64", "512Gi", {},
                                                   time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                 time.gmtime())))
            time.sleep(2.0)
            base = _rss_mib(server)
            names = [f"t{i:02d}" for i in range(args.tenants)]
            start = time.monotonic()
            for name in names:
                host.create(VIRTUALCLUSTERS.collection(), {
                    "apiVersion": "tenancy.gpushare.io/v1alpha1", "kind": "VirtualCluster",
                    "metadata": {"name": name}, "spec": {"queues": ["default-queue"]}})
            _wait_ready(host, names, 300)
            provisioned = time.monotonic() - start
            time.sleep(5.0)
            idle = _rss_mib(server)
            per_tenant = (idle - base) / args.tenants
            print(f"memory: {args.tenants} tenants provisioned in {provisioned:.1f}s; server "
                  f"RSS {base:.1f} -> {idle:.1f} MiB: {per_tenant:.2f} MiB per idle tenant "
                  f"(goal < 5)")
            latencies = _latency(host, kubeconfig, names[:args.busy], args.rate, args.seconds)
        finally:
            running.stop()
            host.close()
            server.terminate()
            server.wait(10)
    print(f"load average after: {os.getloadavg()}")
    if args.plot is not None:
        _plot(args.plot, latencies, args.rate)


def _plot(path: Path, latencies: dict[str, list[float]], rate: float) -> None:
    """Each latency's distribution as a cumulative curve: ms on x, share of pods on y."""
    series = {}
    for label, values in latencies.items():
        ms = sorted(v * 1000 for v in values)
        series[label] = [(v, (i + 1) / len(ms) * 100) for i, v in enumerate(ms)]
    line_plot(path, series, title=f"sync latency at {rate:.0f} pods/s offered",
              xlabel="latency (ms)", ylabel="pods (%, cumulative)", ylim=(0, 100))
    print(f"plot: {path}")


def _latency(host: KubeClient, kubeconfig: str, busy: list[str], rate: float,
             seconds: float) -> dict[str, list[float]]:
    """Offer pods at ``rate``; print and return both latencies (s) by label."""
    sent: dict[str, float] = {}  # "tenant/name" -> create sent
    to_host: list[float] = []
    bound_at: dict[str, float] = {}
    tenant_seen: dict[str, float] = {}
    lock = threading.Lock()
    stop = threading.Event()
    binder = ThreadPoolExecutor(8)
    tenants = {t: tenant_client(kubeconfig, t) for t in busy}

    def bind(tenant: str, host_name: str, key: str) -> None:
        with lock:
            bound_at[key] = time.monotonic()
        host.create(PODS.item(host_name, f"vc-{tenant}", "binding"), {
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": host_name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "box"}})

    def watch_host(rv: str) -> None:
        for event in host.watch("/api/v1/pods", rv, timeout_seconds=int(seconds) + 60):
            if stop.is_set():
                return
            pod = event.get("object") or {}
            meta = pod.get("metadata") or {}
            if event.get("type") != "ADDED" or not meta.get("namespace", "").startswith("vc-"):
                continue
            tenant = meta["namespace"][3:]
            key = f"{tenant}/{(meta.get('labels') or {}).get('tenancy.gpushare.io/name')}"
            now = time.monotonic()
            with lock:
                t0 = sent.get(key)
            if t0 is not None:
                to_host.append(now - t0)
                binder.submit(bind, tenant, meta["name"], key)

    def watch_tenant(tenant: str, client: KubeClient, rv: str) -> None:
        seen: set[str] = set()
        for event in client.watch("/api/v1/pods", rv, timeout_seconds=int(seconds) + 60):
            if stop.is_set():
                return
            pod = event.get("object") or {}
            name = (pod.get("metadata") or {}).get("name")
            key = f"{tenant}/{name}"
            if not (pod.get("spec") or {}).get("nodeName") or key in seen:
                continue
            seen.add(key)
            tenant_seen[key] = time.monotonic()

    threads = [threading.Thread(target=watch_host, args=(
        str(host.list("/api/v1/pods")["metadata"]["resourceVersion"]),), daemon=True)]
    for tenant, client in tenants.items():
        rv = str(client.list("/api/v1/pods")["metadata"]["resourceVersion"])
        threads.append(threading.Thread(target=watch_tenant, args=(tenant, client, rv),
                                        daemon=True))
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    total = int(rate * seconds)
    creators = ThreadPoolExecutor(8)

    def create(i: int) -> None:
        tenant = busy[i % len(busy)]
        name = f"p{i:05d}"
        with lock:
            sent[f"{tenant}/{name}"] = time.monotonic()
        tenants[tenant].create(PODS.collection("default"), {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default",
                         "annotations": {"gpu-fraction": "0.01"}},
            "spec": {"schedulerName": "gpushare",
                     "containers": [{"name": "c", "image": "python",
                                     "command": ["python3", "-c", "pass"]}]}})

    start = time.monotonic()
    for i in range(total):
        due = start + i / rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        creators.submit(create, i)
    elapsed = time.monotonic() - start
    deadline = time.monotonic() + 30
    while (len(to_host) < total or len(tenant_seen) < total) and time.monotonic() < deadline:
        time.sleep(0.2)
    to_tenant = [tenant_seen[k] - bound_at[k] for k in tenant_seen if k in bound_at]
    stop.set()
    creators.shutdown()
    binder.shutdown()
    for client in tenants.values():
        client.close()
    print(f"latency: {total} pods over {len(busy)} tenants at {total / elapsed:.1f} pods/s "
          f"(offered {rate:.0f}/s)")
    for label, values in (("tenant create -> host pod", to_host),
                          ("host bind -> tenant nodeName", to_tenant)):
        ms = [v * 1000 for v in values]
        print(f"  {label}: n={len(ms)} min {min(ms, default=float('nan')):.1f} ms, "
              f"p50 {_pct(ms, 0.5):.1f} ms, median {statistics.median(ms) if ms else 0:.1f} "
              f"ms, p99 {_pct(ms, 0.99):.1f} ms, max {max(ms, default=float('nan')):.1f} ms "
              "(goal p99 < 200)")
    return {"tenant create -> host pod": to_host, "host bind -> tenant nodeName": to_tenant}


if __name__ == "__main__":
    main()
