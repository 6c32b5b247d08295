"""Control plane end to end: pods created through the HTTP API until the scheduler has
bound them all, against many declared GPU nodes.

It starts the embedded API server and ``gpushare controllers`` as processes (as
``gpushare up`` does), registers M static 8-GPU nodes, then creates N pods from a few
client threads and watches them. It prints the sizes, the create rate, pods bound per
second end to end (first create to last bind seen by the watch) and the watch latency
(create sent to ADDED seen), p50 and p99.

    python bench/api_bench.py --pods 2000 --nodes 100
    python bench/api_bench.py --pods 5000 --nodes 500 --pregrouped
    python bench/api_bench.py --pods 2000 --nodes 100 --profile /tmp/prof   # needs py-spy
    python bench/api_bench.py --pods 1000 --nodes 50 --sync normal --commit loop
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

from gpushare.controllers.events import now_rfc3339
from gpushare.controllers.nodes.static_nodes import register_static_node, static_node
from gpushare.kube.client import PODGROUPS, PODS, QUEUES, KubeClient

SERVER = """
import signal, sys, threading
from gpushare.cli.compose import api_server
from gpushare.apiserver.http.server import ApiServer
server = api_server(sys.argv[1], "127.0.0.1", int(sys.argv[2]), sync=sys.argv[4],
                   commit_thread=sys.argv[5] == "thread")
server.start()
server.write_kubeconfig(sys.argv[3])
print("ready", flush=True)
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
signal.signal(signal.SIGINT, lambda *_: stop.set())
stop.wait()
server.stop()
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def podgroup_body(i: int) -> dict:
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": f"pg-bench-{i}", "namespace": "default"},
            "spec": {"minMember": 1, "queue": "bench", "priorityClassName": "train"}}


def pod_body(i: int, size: str, pregrouped: bool = False) -> dict:
    container: dict = {"name": "main", "image": "busybox", "command": ["sleep", "1"],
                       "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}
    annotations: dict[str, str] = {"pod-group-name": f"pg-bench-{i}"} if pregrouped else {}
    if size == "1":
        container["resources"]["limits"] = {"nvidia.com/gpu": "1"}
    else:
        annotations["gpu-fraction"] = size
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"bench-{i}", "namespace": "default",
                     "labels": {"kai.scheduler/queue": "bench"}, "annotations": annotations},
        "spec": {"schedulerName": "gpushare", "containers": [container]},
    }


class Watcher:
    """Watch pods; note when each is first seen and when it is first seen bound."""

    def __init__(self, client: KubeClient, resource_version: str) -> None:
        self.client = client
        self.rv = resource_version
        self.added: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self.grouped: dict[str, float] = {}
        self.abort = None
        self.stopped = False
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stopped:
            try:
                for event in self.client.watch(PODS.collection("default"), self.rv,
                                               on_open=self._on_open):
                    now = time.perf_counter()
                    obj = event.get("object") or {}
                    meta = obj.get("metadata") or {}
                    if meta.get("resourceVersion"):
                        self.rv = meta["resourceVersion"]
                    name = meta.get("name", "")
                    if event.get("type") == "BOOKMARK" or not name.startswith("bench-"):
                        continue
                    self.added.setdefault(name, now)
                    if "pod-group-name" in (meta.get("annotations") or {}):
                        self.grouped.setdefault(name, now)
                    if (obj.get("spec") or {}).get("nodeName"):
                        self.bound.setdefault(name, now)
            except Exception:
                if self.stopped:
                    return
                time.sleep(0.1)

    def _on_open(self, abort) -> None:
        self.abort = abort

    def stop(self) -> None:
        self.stopped = True
        if self.abort is not None:
            self.abort()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--clients", type=int, default=8, help="creating threads")
    parser.add_argument("--pod-gpu", default="0.25", help="GPU per pod: a fraction, or 1")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--pregrouped", action="store_true",
                        help="create the PodGroups before the clock starts and name them on the"
                        " pods (as with PodGroups made by another tool): measures the scheduler"
                        " loop without the pod-grouper's writes")
    parser.add_argument("--profile", type=Path, help="py-spy record server and controllers")
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    parser.add_argument("--sync", choices=("full", "normal"), default="full",
                        help="the API server's SQLite durability (default full)")
    parser.add_argument("--commit", choices=("thread", "loop"), default="thread",
                        help="where the API server's SQLite commit runs: its writer thread "
                             "(default) or the event loop")
    args = parser.parse_args()

    if args.profile and shutil.which("py-spy") is None:
        sys.exit("--profile needs py-spy (pip install py-spy)")
    workdir = Path(tempfile.mkdtemp(prefix="gpushare-bench-"))
    data, kubeconfig, port = workdir / "data", workdir / "admin.kubeconfig", free_port()
    data.mkdir()
    procs: list[subprocess.Popen] = []
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(data), str(port),
                               str(kubeconfig), args.sync, args.commit],
                              stdout=subprocess.PIPE,
                              stderr=(workdir / "server.log").open("wb"))
    procs.append(server)
    assert server.stdout is not None
    if server.stdout.readline().strip() != b"ready":
        sys.exit(f"the API server did not start; see {workdir / 'server.log'}")
    client = KubeClient.from_kubeconfig(str(kubeconfig), pool_size=args.clients + 4)
    print(f"machine: {os.cpu_count()} CPUs; pods={args.pods} nodes={args.nodes} (8xH100 each)"
          f" pod-gpu={args.pod_gpu} clients={args.clients} pregrouped={args.pregrouped}"
          f" sync={args.sync} commit={args.commit}; load average {os.getloadavg()}")

    started = time.perf_counter()
    with ThreadPoolExecutor(args.clients) as pool:
        list(pool.map(lambda n: register_static_node(
            client, static_node(f"node-{n:04d}", "8xH100", "64", "512Gi", {}, now_rfc3339(),
                                taint=False)),
            range(args.nodes)))
    print(f"registered {args.nodes} nodes in {time.perf_counter() - started:.2f}s")
    client.create(QUEUES.collection(), {
        "apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "bench"},
        "spec": {"resources": {r: {"quota": -1, "limit": -1, "overQuotaWeight": 1}
                               for r in ("gpu", "cpu", "memory")}}})

    if args.pregrouped:
        started = time.perf_counter()
        with ThreadPoolExecutor(args.clients) as pool:
            list(pool.map(lambda i: client.create(
                PODGROUPS.collection("default"),
                podgroup_body(i)), range(args.pods)))
        print(f"created {args.pods} PodGroups in {time.perf_counter() - started:.2f}s")

    controllers = subprocess.Popen(
        [sys.executable, "-m", "gpushare.cli.main", "controllers", "--kubeconfig",
         str(kubeconfig)], stdout=(workdir / "controllers.log").open("wb"),
        stderr=subprocess.STDOUT)
    procs.append(controllers)
    spies: list[subprocess.Popen] = []
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
        for name, proc in (("server", server), ("controllers", controllers)):
            spies.append(subprocess.Popen(
                ["py-spy", "record", "-p", str(proc.pid), "-o",
                 str(args.profile / f"{name}.txt"), "--format", "raw", "--rate", "250",
                 "--nonblocking", "--threads", "--gil"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    time.sleep(2.0)  # the controllers list and watch before the burst

    listing = client.list(PODS.collection("default"))
    watcher = Watcher(client, str(listing["metadata"]["resourceVersion"]))
    watcher.thread.start()
    sent: dict[str, float] = {}
    errors = 0

    def create(i: int) -> None:
        nonlocal errors
        body = pod_body(i, args.pod_gpu, args.pregrouped)
        sent[body["metadata"]["name"]] = time.perf_counter()
        try:
            client.create(PODS.collection("default"), body)
        except Exception:
            errors += 1

    watched = {"server": psutil.Process(server.pid), "controllers": psutil.Process(controllers.pid),
               "bench client": psutil.Process()}
    cpu_before = {name: sum(p.cpu_times()[:2]) for name, p in watched.items()}
    machine_before = psutil.cpu_times()
    first = time.perf_counter()
    with ThreadPoolExecutor(args.clients) as pool:
        list(pool.map(create, range(args.pods)))
    created = time.perf_counter()
    deadline = created + args.timeout
    while len(watcher.bound) < args.pods - errors and time.perf_counter() < deadline:
        time.sleep(0.05)
    # The pod-grouper annotates pods after their PodGroups; the work is only done when
    # every pod carries its annotation, and the CPU figures cover that too.
    while len(watcher.grouped) < args.pods - errors and time.perf_counter() < deadline:
        time.sleep(0.05)
    watcher.stop()
    # PodGroup phases are written last (after binds); the run ends when they are.
    phased_at = time.perf_counter()
    while time.perf_counter() < deadline:
        groups = client.list(PODGROUPS.collection("default"))["items"]
        if sum(1 for g in groups if (g.get("status") or {}).get("phase") == "Running") >= (
            args.pods - errors
        ):
            phased_at = time.perf_counter()
            break
        time.sleep(0.25)
    wall = time.perf_counter() - first
    cpu = {name: sum(p.cpu_times()[:2]) - cpu_before[name] for name, p in watched.items()}
    machine_after = psutil.cpu_times()
    machine_idle = (machine_after.idle - machine_before.idle) / (wall * (os.cpu_count() or 1))

    for spy in spies:
        spy.send_signal(signal.SIGINT)
    for spy in spies:
        try:
            spy.wait(30)
        except subprocess.TimeoutExpired:
            spy.kill()
    for proc in reversed(procs):
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()

    bound = len(watcher.bound)
    last_bound = max(watcher.bound.values(), default=first)
    watch_lat = [watcher.added[n] - sent[n] for n in watcher.added if n in sent]
    bind_lat = [watcher.bound[n] - sent[n] for n in watcher.bound if n in sent]
    create_rate = args.pods / (created - first)
    print(f"created {args.pods - errors}/{args.pods} pods in {created - first:.2f}s "
          f"({create_rate:.0f}/s), {errors} errors")
    span = max(last_bound - first, 1e-9)
    print(f"bound {bound}/{args.pods} pods; first create -> last bound {span:.2f}s"
          f" = {bound / span:.0f} pods/s end to end")
    print(f"watch latency (create sent -> ADDED seen): p50 {percentile(watch_lat, .5) * 1e3:.1f}"
          f" ms, p99 {percentile(watch_lat, .99) * 1e3:.1f} ms")
    print(f"bind latency (create sent -> bound seen): p50 {percentile(bind_lat, .5) * 1e3:.0f}"
          f" ms, p99 {percentile(bind_lat, .99) * 1e3:.0f} ms")
    grouping = [watcher.grouped[n] - sent[n] for n in watcher.grouped if n in sent]
    last_annotated = max(watcher.grouped.values(), default=first) - first
    print(f"pod-group-name annotation seen after the create: p50"
          f" {percentile(grouping, .5) * 1e3:.0f} ms, p99 {percentile(grouping, .99) * 1e3:.0f} ms;"
          f" all {len(grouping)} annotated {last_annotated:.2f}s after the first create")
    print(f"PodGroups all Running {phased_at - first:.2f}s after the first create")
    print(f"CPU from the first create until all bound, annotated and Running ({wall:.2f}s): "
          + ", ".join(
        f"{name} {seconds:.1f}s ({seconds / wall:.0%})" for name, seconds in cpu.items())
        + f"; machine idle {machine_idle:.0%}")
    if args.profile:
        print(f"profiles (collapsed stacks): {args.profile}/server.txt,"
              f" {args.profile}/controllers.txt")
    stats = [line.split(": ", 2)[-1] for line in
             (workdir / "controllers.log").read_text().splitlines() if "scheduler: " in line]
    if stats:
        print("controllers: " + stats[-1].strip())
    client.close()
    if args.keep:
        print(f"data kept in {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
