"""API server alone: pod creates, bindings and watch delivery per second.

Starts the server as a subprocess (HTTPS, SQLite WAL, as in production), then from C client
threads creates N pods and binds each of them to one of a few nodes through
`pods/<name>/binding`, while W watchers stream pod events. Prints the sizes, the create and
bind rates, and how long the watchers took to see the last binding.

    python bench/apiserver_bench.py --pods 2000 --clients 4 --watchers 3
    python bench/apiserver_bench.py --sync full,normal --commit thread,loop --repeat 3

`--sync` and `--commit` take lists: every combination runs in each repeat, alternating,
and the summary gives min and median per combination. Each run also prints the cost of
one fsync on the data directory's disk (a loop of small appends, each fsynced) and the
server's RSS at the end.
"""

from __future__ import annotations

import argparse
import http.client
import os
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import orjson
import psutil
import yaml

SERVER = """
import signal, sys, threading
from gpushare.cli.compose import api_server
from gpushare.apiserver.http.server import ApiServer
server = api_server(sys.argv[1], "127.0.0.1", 0, sync=sys.argv[2],
                   commit_thread=sys.argv[3] == "thread")
server.start()
print(server.port, flush=True)
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
stop.wait()
server.stop()
"""


class Conn:
    def __init__(self, port: int, token: str, ctx: ssl.SSLContext) -> None:
        self.conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                        "Accept": "application/json"}

    def post(self, path: str, body: dict) -> int:
        self.conn.request("POST", path, orjson.dumps(body), self.headers)
        resp = self.conn.getresponse()
        resp.read()
        return resp.status


def pod(name: str) -> dict:
    return {"metadata": {"name": name, "labels": {"kai.scheduler/queue": "bench"},
                         "annotations": {"gpu-fraction": "0.25"}},
            "spec": {"containers": [{"name": "main", "image": "busybox",
                                     "resources": {"requests": {"cpu": "100m"}}}]}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--watchers", type=int, default=3)
    parser.add_argument("--profile", type=Path, help="write a py-spy flame graph here "
                                                     "(collapsed stacks if it ends in .txt); "
                                                     "wall clock: idle samples included, "
                                                     "per thread")
    parser.add_argument("--sync", default="full",
                        help="SQLite durability modes to compare, e.g. full,normal")
    parser.add_argument("--commit", default="thread",
                        help="where the SQLite commit runs: 'thread' (the store's writer "
                             "thread, the default) or 'loop' (the event loop); a list "
                             "compares them, e.g. thread,loop")
    parser.add_argument("--repeat", type=int, default=1, help="runs per mode (min, median)")
    args = parser.parse_args()
    modes = [(s, c) for s in args.sync.split(",") for c in args.commit.split(",")]
    for sync, commit in modes:
        if sync not in ("full", "normal") or commit not in ("thread", "loop"):
            parser.error(f"--sync takes full/normal and --commit thread/loop, not "
                         f"{sync!r}/{commit!r}")
    results: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    fsyncs: list[float] = []
    for _ in range(args.repeat):
        for mode in modes:
            print(f"-- sync={mode[0]} commit={mode[1]}; load average "
                  f"{os.getloadavg()[0]:.2f}", flush=True)
            fsyncs.append(fsync_ms())
            results.setdefault(mode, []).append(run(args, *mode))
    print(f"one fsync here: min {min(fsyncs):.2f} ms, median {statistics.median(fsyncs):.2f}"
          f" ms (median of 50 per run, {len(fsyncs)} runs); load average now "
          f"{os.getloadavg()}")
    for (sync, commit), rows in results.items():
        creates = sorted(r[0] for r in rows)
        pairs = sorted(r[1] for r in rows)
        per_commit = sorted(r[2] for r in rows)
        print(f"sync={sync} commit={commit}: creates/s min {creates[0]:.0f} median "
              f"{statistics.median(creates):.0f}; pods created+bound/s min {pairs[0]:.0f} "
              f"median {statistics.median(pairs):.0f}; writes per commit median "
              f"{statistics.median(per_commit):.1f} ({len(rows)} runs)")


def fsync_ms(count: int = 50) -> float:
    """Median milliseconds of one fsync after a 4 KiB append, in a temporary directory
    (where the bench's data directories are)."""
    times = []
    with tempfile.NamedTemporaryFile(prefix="fsync-") as f:
        for _ in range(count):
            f.write(os.urandom(4096))
            f.flush()
            start = time.perf_counter()
            os.fsync(f.fileno())
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def run(args: argparse.Namespace, sync: str, commit: str) -> tuple[float, float, float]:
    data = Path(tempfile.mkdtemp(prefix="apiserver-bench-"))
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(data), sync, commit],
                            stdout=subprocess.PIPE)
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    spy = None
    if args.profile:
        fmt = "raw" if args.profile.suffix == ".txt" else "flamegraph"
        spy = subprocess.Popen(["py-spy", "record", "-o", str(args.profile), "-p",
                                str(proc.pid), "--nonblocking", "--format", fmt,
                                "--threads", "--idle"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    token = yaml.safe_load((data / "tokens.yaml").read_text())["tokens"][0]["token"]
    ctx = ssl.create_default_context(cafile=str(data / "pki" / "ca.crt"))

    per_client = args.pods // args.clients
    seen_bound: list[float] = []
    done = threading.Event()

    def watch() -> None:
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx)
        conn.request("GET", "/api/v1/namespaces/default/pods?watch=true&timeoutSeconds=600",
                     headers={"Authorization": f"Bearer {token}"})
        resp = conn.getresponse()
        bound = 0
        while bound < per_client * args.clients:
            line = resp.readline()
            if not line:
                break
            event = orjson.loads(line)
            if event["type"] == "MODIFIED" and event["object"]["spec"].get("nodeName"):
                bound += 1
        seen_bound.append(time.perf_counter())
        conn.close()

    watchers = [threading.Thread(target=watch) for _ in range(args.watchers)]
    for w in watchers:
        w.start()
    time.sleep(0.5)
    created_at: list[float] = []

    def client(idx: int) -> None:
        c = Conn(port, token, ctx)
        names = [f"p-{idx}-{i}" for i in range(per_client)]
        for n in names:
            assert c.post("/api/v1/namespaces/default/pods", pod(n)) == 201
        created_at.append(time.perf_counter())
        for i, n in enumerate(names):
            binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {
                "name": n, "annotations": {"gpushare.io/gpu-indices": str(i % 8)}},
                "target": {"kind": "Node", "name": f"node-{i % 10}"}}
            assert c.post(f"/api/v1/namespaces/default/pods/{n}/binding", binding) == 201

    pods = per_client * args.clients
    start = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    end = time.perf_counter()
    for w in watchers:
        w.join(timeout=120)
    done.set()
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx)
    conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {token}"})
    metrics = conn.getresponse().read().decode()
    stats = {line.split()[0]: float(line.split()[1]) for line in metrics.splitlines()
             if line.startswith(("apiserver_storage_writes ", "apiserver_storage_commits "))}
    rss = psutil.Process(proc.pid).memory_info().rss
    if spy is not None:
        spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT only
        spy.wait()
    proc.terminate()
    proc.wait()
    creates = max(created_at) - start
    print(f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; pods={pods} "
          f"clients={args.clients} watchers={args.watchers} sync={sync} commit={commit}; "
          f"server RSS {rss / 2**20:.0f} MiB")
    print(f"creates: {pods / creates:.0f}/s (all created after {creates:.2f}s)")
    print(f"creates + bindings: {2 * pods / (end - start):.0f} requests/s; "
          f"{pods / (end - start):.0f} pods created and bound/s")
    writes = stats.get("apiserver_storage_writes", 0.0)
    commits = stats.get("apiserver_storage_commits", 0.0)
    print(f"store: {writes:.0f} writes in {commits:.0f} commits "
          f"({writes / max(commits, 1):.1f} writes per commit)")
    if seen_bound:
        print(f"every watcher saw every binding {max(seen_bound) - end:.3f}s after the last "
              f"bind returned ({len(seen_bound)}/{args.watchers} watchers complete)")
    return pods / creates, pods / (end - start), writes / max(commits, 1)


if __name__ == "__main__":
    main()
