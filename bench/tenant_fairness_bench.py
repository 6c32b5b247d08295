"""One tenant's storms against another tenant's GETs, and what quotas and fairness cost.

    python bench/tenant_fairness_bench.py [--delete 5000] [--list 10000] [--repeat 2]

Runs `gpushare apiserver` as its own process twice, side by side in one run: *before*
(`--no-flow-control --watch-backlog-bytes 0`, tenant quotas still in the spec but the
fairness, slicing and watch bound off) and *after* (the defaults). In each, tenant `storm`
does, one after another:

1. a deletecollection of `--delete` ConfigMaps;
2. a LIST storm: 8 clients listing `--list` ConfigMaps over and over for `--seconds`;
3. a slow watch: 4 watches that never read while one object is written 120 times at 2 MB;

while tenant `quiet` GETs one ConfigMap every 10 ms; the GETs' p50/p99/max during each
storm are printed (min and median over `--repeat`), with the server's RSS after the slow
watch (and before the storms). Then create throughput (`quiet`, 4 clients, `--creates`
ConfigMaps) on both servers, running at the same time, in alternating rounds (`--rounds`),
max and median. Prints the machine's CPUs, its load and
a calibration figure (orjson round trips of a 1 KB object per second in this process).
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import psutil
import yaml

CMS = "/api/v1/namespaces/{ns}/configmaps"
VCS = "/apis/tenancy.gpushare.io/v1alpha1/virtualclusters"
RBAC = "/apis/rbac.authorization.k8s.io/v1"


class Server:
    def __init__(self, data: Path, fair: bool) -> None:
        args = [sys.executable, "-m", "gpushare.cli.main", "apiserver", "--data-dir",
                str(data), "--port", "0", "--sync", "normal"]
        if not fair:
            args += ["--no-flow-control", "--watch-backlog-bytes", "0"]
        self.proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
        assert self.proc.stderr is not None
        line = self.proc.stderr.readline()
        match = re.search(r"listening on (https://\S+);", line)
        assert match, line + self.proc.stderr.read()
        self.url = match.group(1)
        self.data = data
        self.ca = str(data / "pki" / "ca.crt")
        self.admin = yaml.safe_load((data / "tokens.yaml").read_text())["tokens"][0]["token"]
        while True:
            try:
                if self.client().get("/livez").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)

    def client(self, token: str | None = None, cluster: str = "") -> httpx.Client:
        base = self.url + (f"/clusters/{cluster}" if cluster else "")
        return httpx.Client(base_url=base, verify=ssl.create_default_context(cafile=self.ca),
                            headers={"Authorization": f"Bearer {token or self.admin}"},
                            timeout=600)

    def rss_mib(self) -> float:
        return float(psutil.Process(self.proc.pid).memory_info().rss) / 2**20

    def tenant(self, name: str) -> str:
        from gpushare.apiserver.auth.access import TokenFile

        with self.client() as admin:
            admin.post(VCS, json={"apiVersion": "tenancy.gpushare.io/v1alpha1",
                                  "kind": "VirtualCluster", "metadata": {"name": name},
                                  "spec": {"queues": ["default"], "maxObjects": 100_000,
                                           "maxStorageBytes": "4Gi"}}).raise_for_status()
        with self.client(cluster=name) as admin:
            admin.get("/api/v1/namespaces/default").raise_for_status()
            admin.post("/api/v1/namespaces", json={"metadata": {"name": "listed"}})
            admin.post(f"{RBAC}/clusterroles", json={
                "metadata": {"name": "everything"},
                "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]})
            admin.post(f"{RBAC}/clusterrolebindings", json={
                "metadata": {"name": "tenant"}, "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "everything"},
                "subjects": [{"kind": "User", "name": f"{name}-user"}]}).raise_for_status()
        token = secrets.token_urlsafe(24)
        TokenFile(self.data / "tokens.yaml").add(token, f"{name}-user", [], [name])
        time.sleep(1.5)  # the server re-reads tokens.yaml when it changes
        return token

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def fill(server: Server, token: str, cluster: str, ns: str, n: int, size: int = 200,
         prefix: str = "cm") -> None:
    def part(k: int) -> None:
        with server.client(token, cluster) as c:
            for i in range(k, n, 4):
                c.post(CMS.format(ns=ns), json={"metadata": {"name": f"{prefix}{i:06}"},
                                                "data": {"v": "x" * size}}).raise_for_status()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(part, range(4)))


class Probe:
    """The quiet tenant's GET every 10 ms; latencies while `active`."""

    def __init__(self, server: Server, token: str) -> None:
        self.client = server.client(token, "quiet")
        self.client.post(CMS.format(ns="default"), json={"metadata": {"name": "probe"}})
        self.samples: list[float] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            t = time.perf_counter()
            self.client.get("/api/v1/namespaces/default/configmaps/probe").raise_for_status()
            self.samples.append(time.perf_counter() - t)
            time.sleep(0.01)

    def during(self, work: Any) -> list[float]:
        self.samples = []
        work()
        out, self.samples = self.samples, []
        return out

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.client.close()


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000 if xs else float("nan")


def slow_watch(server: Server, token: str) -> float:
    """4 watches that never read while 120 x 2 MB writes: the server's RSS after (MiB)."""
    socks = []
    for _ in range(4):
        raw = socket.create_connection(server.url.removeprefix("https://").split(":"))
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        ctx = ssl.create_default_context(cafile=server.ca)
        s = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        s.sendall(f"GET /clusters/storm{CMS.format(ns='default')}?watch=true HTTP/1.1\r\n"
                  f"Host: x\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
        socks.append(s)
    with server.client(token, "storm") as c:
        path = CMS.format(ns="default")
        c.post(path, json={"metadata": {"name": "big"}, "data": {"v": ""}})
        for i in range(120):
            c.put(f"{path}/big", json={"metadata": {"name": "big"},
                                       "data": {"v": str(i % 10) * 2_000_000}})
        rss = server.rss_mib()
        c.delete(f"{path}/big")
    for s in socks:
        s.close()
    return rss


def storms(server: Server, args: argparse.Namespace) -> dict[str, Any]:
    storm, quiet = server.tenant("storm"), server.tenant("quiet")
    fill(server, storm, "storm", "listed", args.list)
    probe = Probe(server, quiet)
    out: dict[str, Any] = {"delete": [], "list": [], "watch": [], "rss": [],
                           "rss0": server.rss_mib()}
    try:
        for _ in range(args.repeat):
            fill(server, storm, "storm", "default", args.delete, prefix="d")
            with server.client(storm, "storm") as c:
                lat = probe.during(lambda c=c: c.delete(CMS.format(ns="default"),
                                                        params={"labelSelector": ""}))
            out["delete"].append(lat)

            def list_storm() -> None:
                end = time.monotonic() + args.seconds

                def one() -> None:
                    with server.client(storm, "storm") as c:
                        while time.monotonic() < end:
                            c.get(CMS.format(ns="listed")).raise_for_status()
                with ThreadPoolExecutor(8) as pool:
                    list(pool.map(lambda _: one(), range(8)))
            out["list"].append(probe.during(list_storm))
            rss: list[float] = []
            out["watch"].append(probe.during(lambda rss=rss: rss.append(
                slow_watch(server, storm))))
            out["rss"].append(rss[0])
    finally:
        probe.close()
    return out


def calibrate() -> float:
    obj = {"metadata": {"name": "x" * 20, "labels": {"a": "b"}}, "data": {"k": "v" * 1000}}
    t = time.perf_counter()
    for _ in range(20000):
        orjson.loads(orjson.dumps(obj))
    return 20000 / (time.perf_counter() - t)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--delete", type=int, default=5000)
    p.add_argument("--list", type=int, default=10000)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--creates", type=int, default=1000)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    print(f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()}; calibration "
          f"{calibrate():,.0f} orjson round trips/s; sizes: delete={args.delete} "
          f"list={args.list} x8 clients {args.seconds}s, watch 4 x 120 x 2 MB, "
          f"creates={args.creates} x {args.rounds} rounds, repeat={args.repeat}", flush=True)
    results: dict[str, dict[str, Any]] = {}
    rates: dict[str, list[float]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as tmp:
        servers = {label: Server(Path(tmp) / label, fair)
                   for label, fair in (("before", False), ("after", True))}
        try:
            for label, server in servers.items():
                results[label] = storms(server, args)
                print(f"[{label}] storms done, load {os.getloadavg()[0]:.2f}", flush=True)
            tokens = {}
            for label, server in servers.items():
                tokens[label] = server.tenant("quiet2")
                with server.client() as admin:
                    admin.get("/clusters/quiet2/api/v1/namespaces/listed")
            for _ in range(args.rounds):  # alternating: both see the same machine
                for label, server in servers.items():
                    rates[label].append(_creates_in(server, tokens[label], args.creates))
        finally:
            for server in servers.values():
                server.stop()
    report(results, rates, args)


def report(results: dict[str, dict[str, Any]], rates: dict[str, list[float]],
           args: argparse.Namespace) -> None:
    print(f"\nquiet tenant's GET latency (ms) while the storm tenant runs each storm; "
          f"min / median over {args.repeat} runs; load {os.getloadavg()}")
    print(f"{'storm':<24}{'':8}{'p50':>14}{'p99':>16}{'max':>16}{'GETs':>8}")
    for storm in ("delete", "list", "watch"):
        for label in ("before", "after"):
            runs = results[label][storm]
            cols = []
            for q in (0.5, 0.99, 1.0):
                vals = [_pct(r, q) for r in runs]
                cols.append(f"{min(vals):7.1f}/{statistics.median(vals):7.1f}")
            print(f"{storm:<24}{label:8}{cols[0]:>14}{cols[1]:>16}{cols[2]:>16}"
                  f"{min(len(r) for r in runs):>8}")
    for label in ("before", "after"):
        rss = results[label]["rss"]
        print(f"server RSS ({label}): {results[label]['rss0']:.0f} MiB before the storms, "
              f"after the slow watch {min(rss):.0f} / {statistics.median(rss):.0f} MiB")
    print("create throughput (objects/s, quiet tenant, 4 clients), max / median:")
    for label in ("before", "after"):
        print(f"  {label}: {max(rates[label]):.0f} / {statistics.median(rates[label]):.0f}")
    cost = 1 - statistics.median(rates["after"]) / statistics.median(rates["before"])
    print(f"  cost of quota + fairness (median): {cost * 100:+.1f} %")


def _creates_in(server: Server, token: str, n: int) -> float:
    done = time.perf_counter()

    def part(k: int) -> None:
        with server.client(token, "quiet2") as c:
            for i in range(k, n, 4):
                c.post(CMS.format(ns="listed"), json={"metadata": {"name": f"t{i:06}"},
                                                      "data": {"v": "x"}}).raise_for_status()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(part, range(4)))
    rate = n / (time.perf_counter() - done)
    with server.client(token, "quiet2") as c:
        c.delete(CMS.format(ns="listed"))
    return rate


if __name__ == "__main__":
    main()
