"""A seeded fault run of the whole product: the API server, the controllers and a node agent
as separate processes (as `gpushare up` runs them, the agent with declared GPUs), a workload
of creates, deletes, gang Jobs and quota-driven evictions, and a chaos thread that kills one
of the three with SIGKILL at random moments and starts it again.

What is checked, while it runs and at the end:

* **no acknowledged write lost**: every ConfigMap ends exactly as its last acknowledged
  write left it (value and resourceVersion), or as a later write whose answer was lost;
  every CPU-only pod (a queue nobody evicts from) whose create was acknowledged and that
  the workload did not delete is there with the same uid; after every restart of the
  server its resourceVersion is at least the newest one it acknowledged before the kill.
* **no GPU slot over-committed at any moment**: a sampler reads the process table every
  few milliseconds; the pods' processes carry the agent's `NVIDIA_VISIBLE_DEVICES` and
  `GPU_PORTION`, and per GPU the portions of the live processes must sum to at most 1.
  A watch of the pods checks the bookings too: among bound pods that are not being
  deleted, the slot annotations of one GPU sum to at most 1.
* **every pod running once or pending with a reason**: once the faults stop and the
  system settles, each pod is either Running with exactly one live process of its uid
  (no duplicate after an agent restart, no process left of a deleted pod) and never
  restarted (its `sleep` ends only if something killed it: an agent restart takes over
  its pods and kills none of them), or not bound
  with a `PodScheduled=False` condition that says why. A pod the agent refused as
  over-committing a GPU (`Failed`, `GPUOvercommitted`) is a violation, also listed apart
  (`ledger_refusals`): the agent's safety net caught a binding it should never get.

    run = ChaosRun(root, seed=1, seconds=25)
    result = run.run()
    assert not result.violations
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from gpushare.agent.pods.ledger import OVERCOMMITTED
from gpushare.kube.client import CONFIGMAPS, JOBS, PODS, QUEUES, ApiError, KubeClient

NODE = "chaos-node"
NAMESPACE = "default"
GPUS = "2xH100"
GPU_QUEUES = ("team-a", "team-b")  # quota 1 GPU each: one bursting into the other's is
STEADY_QUEUE = "steady"            # reclaimed; CPU-only pods, never evicted
MAX_LIVE_PODS = 10
CONFIGMAP_KEYS = 6
MARK = "CHAOS_TRIAL"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- the three processes -------------------------------------------------------------------


@dataclass
class Component:
    """One of the product's processes, killed with SIGKILL and started again by the run."""

    name: str
    argv: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gpushare.cli.main", *self.argv],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.starts += 1

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.kill9()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


# -- what the workload was told ------------------------------------------------------------


@dataclass
class Ledger:
    """Writes and their answers: acknowledged, refused (4xx) or unknown (no answer)."""

    acked: int = 0
    unknown: int = 0
    refused: int = 0
    max_acked_rv: int = 0
    # ConfigMap name -> the values its final state may have (None: absent): the last
    # acknowledged write's, and any later unanswered one's; and the rv of the last
    # acknowledged write (None when that was a delete).
    cm_allowed: dict[str, set[str | None]] = field(default_factory=dict)
    cm_acked_rv: dict[str, int | None] = field(default_factory=dict)
    steady_pods: dict[str, str] = field(default_factory=dict)  # name -> uid, create acked
    steady_deleted: set[str] = field(default_factory=set)      # delete sent (any answer)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ack(self, obj: dict[str, Any] | None) -> None:
        with self.lock:
            self.acked += 1
            rv = ((obj or {}).get("metadata") or {}).get("resourceVersion")
            if rv:
                self.max_acked_rv = max(self.max_acked_rv, int(rv))


def _client_without_retries(kubeconfig: Path) -> KubeClient:
    """A client that sends each request once: urllib3's default retries would resend a
    write whose connection broke (maybe after the server committed it) and then report
    only the last attempt's error, "connection refused", as if nothing had been sent."""
    configuration = k8s_client.Configuration()
    k8s_config.load_kube_config(config_file=str(kubeconfig),
                                client_configuration=configuration)
    configuration.retries = 0
    return KubeClient(k8s_client.ApiClient(configuration))


def _definite_refusal(error: Exception) -> bool:
    """An answer that says the write was not made: a 4xx, or no connection at all."""
    if isinstance(error, urllib3.exceptions.MaxRetryError):
        return isinstance(error.reason, urllib3.exceptions.NewConnectionError)
    return isinstance(error, ApiError) and 400 <= error.status < 500 and error.status != 429


# -- objects -------------------------------------------------------------------------------


def _container(trial: str, gpu: str | None) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main", "image": "busybox", "command": ["sleep", "3600"],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
        "env": [{"name": MARK, "value": trial},
                {"name": "CHAOS_POD",
                 "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "CHAOS_UID",
                 "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}],
    }
    if gpu == "1":
        container["resources"]["limits"] = {"nvidia.com/gpu": "1"}
    return container


def pod_body(trial: str, name: str, queue: str, gpu: str | None,
             priority: str = "train") -> dict[str, Any]:
    annotations = {"gpu-fraction": gpu} if gpu not in (None, "1") else {}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE, "annotations": annotations,
                         "labels": {"kai.scheduler/queue": queue, "priorityClassName": priority,
                                    "chaos": "yes"}},
            "spec": {"schedulerName": "gpushare", "terminationGracePeriodSeconds": 1,
                     "containers": [_container(trial, gpu)]}}


def gang_body(trial: str, name: str, queue: str, members: int, gpu: str) -> dict[str, Any]:
    annotations = {"gpu-fraction": gpu} if gpu != "1" else {}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": NAMESPACE,
                         "labels": {"kai.scheduler/queue": queue},
                         "annotations": {"kai.scheduler/batch-min-member": str(members)}},
            "spec": {"parallelism": members, "completions": members, "backoffLimit": 100,
                     "template": {
                         "metadata": {"annotations": annotations,
                                      "labels": {"chaos": "yes"}},
                         "spec": {"schedulerName": "gpushare", "restartPolicy": "Never",
                                  "terminationGracePeriodSeconds": 1,
                                  "containers": [_container(trial, gpu)]}}}}


def queue_body(name: str, gpu_quota: float) -> dict[str, Any]:
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
            "spec": {"resources": {
                "gpu": {"quota": gpu_quota, "limit": -1, "overQuotaWeight": 1},
                "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}}


# -- the process table ---------------------------------------------------------------------


@dataclass(frozen=True)
class PodProcess:
    pid: int
    pod: str
    uid: str
    gpus: tuple[str, ...]
    portion: Fraction


def pod_processes(trial: str) -> list[PodProcess]:
    """The live `sleep` processes of this trial's pods, read from /proc."""
    out: list[PodProcess] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/comm", "rb") as f:
                if f.read().strip() != b"sleep":
                    continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                raw = f.read()
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state == b"Z":
            continue
        env = dict(item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
        if env.get(MARK.encode()) != trial.encode():
            continue
        visible = env.get(b"NVIDIA_VISIBLE_DEVICES", b"void").decode()
        gpus = () if visible in ("", "void", "none") else tuple(visible.split(","))
        out.append(PodProcess(int(entry), env.get(b"CHAOS_POD", b"?").decode(),
                              env.get(b"CHAOS_UID", b"?").decode(), gpus,
                              Fraction(env.get(b"GPU_PORTION", b"0").decode())))
    return out


def overcommitted(processes: list[PodProcess]) -> dict[str, list[tuple[str, str]]]:
    """GPUs whose live processes' portions sum past one, with who holds them."""
    held: dict[str, Fraction] = defaultdict(Fraction)
    holders: dict[str, list[tuple[str, str]]] = defaultdict(list)
    seen: set[tuple[str, str]] = set()
    for p in processes:
        for gpu in p.gpus:
            if (p.uid, gpu) in seen:  # two processes of one pod: counted as a duplicate
                continue
            seen.add((p.uid, gpu))
            held[gpu] += p.portion
            holders[gpu].append((p.pod, str(p.portion)))
    return {gpu: holders[gpu] for gpu, total in held.items() if total > 1}


def booked_overcommit(pods: dict[str, dict[str, Any]]) -> dict[str, list[tuple[str, str]]]:
    """Per (node, GPU index), the bookings of bound pods not being deleted, past one."""
    held: dict[str, Fraction] = defaultdict(Fraction)
    holders: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for pod in pods.values():
        meta, spec = pod["metadata"], pod.get("spec") or {}
        ann = meta.get("annotations") or {}
        if meta.get("deletionTimestamp") or not spec.get("nodeName"):
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        indices = ann.get("gpushare.io/gpu-indices")
        if not indices:
            continue
        portion = Fraction(ann.get("gpushare.io/gpu-portion") or "1")
        for index in indices.split(","):
            gpu = f"{spec['nodeName']}/{index}"
            held[gpu] += portion
            holders[gpu].append((meta["name"], str(portion)))
    return {gpu: holders[gpu] for gpu, total in held.items() if total > 1}


# -- the run -------------------------------------------------------------------------------


@dataclass
class Result:
    seed: int
    seconds: float
    writes: int = 0          # acknowledged
    unknown_writes: int = 0  # sent, answer lost (a kill)
    refused_writes: int = 0
    kills: Counter[str] = field(default_factory=Counter)
    exits: Counter[str] = field(default_factory=Counter)  # exited by itself, restarted
    samples: int = 0         # process-table samples taken
    booking_checks: int = 0  # pod states checked by the watch
    evictions: int = 0       # pods deleted by the controllers (seen by the watch)
    running: int = 0
    pending: int = 0
    violations: list[str] = field(default_factory=list)
    # Pods the agent refused to start because its ledger of GPU slots said the binding
    # would over-commit a GPU (Failed, GPUOvercommitted): the agent's safety net caught a
    # binding the scheduler should not have made. Listed apart, and violations too.
    ledger_refusals: list[str] = field(default_factory=list)

    def summary(self) -> str:
        kills = ", ".join(f"{k} {v}" for k, v in sorted(self.kills.items()))
        exits = ", ".join(f"{k} {v}" for k, v in sorted(self.exits.items()))
        return (f"seed {self.seed}: {self.seconds:.0f}s, {self.writes} acknowledged writes "
                f"({self.unknown_writes} unanswered, {self.refused_writes} refused), kills: "
                f"{kills or 'none'}, restarts after an exit: {exits or 'none'}, "
                f"{self.evictions} evictions, {self.samples} process "
                f"samples, {self.booking_checks} booking checks, end: {self.running} running,"
                f" {self.pending} pending, {len(self.ledger_refusals)} refused by the agent's"
                f" ledger, {len(self.violations)} violations")


class ChaosRun:
    def __init__(self, root: Path, seed: int, seconds: float, *,
                 kill_every: tuple[float, float] = (1.5, 4.0),
                 settle_timeout: float = 45.0) -> None:
        self.root = root
        self.seed = seed
        self.seconds = seconds
        self.kill_every = kill_every
        self.settle_timeout = settle_timeout
        self.trial = f"chaos-{os.getpid()}-{seed}-{time.time_ns()}"
        self.port = free_port()
        data = root / "api"
        self.kubeconfig = data / "admin.kubeconfig"
        self.server = Component("apiserver", [
            "apiserver", "--data-dir", str(data), "--port", str(self.port)],
            root / "apiserver.log")
        self.controllers = Component("controllers", [
            "controllers", "--kubeconfig", str(self.kubeconfig), "--metrics-interval", "0"],
            root / "controllers.log")
        self.agent = Component("agent", [
            "agent", "--kubeconfig", str(self.kubeconfig), "--node-name", NODE,
            "--gpus", GPUS, "--data-dir", str(root / "agent"), "--heartbeat", "1",
            "--restart-backoff", "0.5", "--metrics-interval", "0"], root / "agent.log")
        self.ledger = Ledger()
        self.result = Result(seed, seconds)
        self.stop = threading.Event()
        self.faults_over = threading.Event()
        self.pods: dict[str, dict[str, Any]] = {}  # the watch's view, by name
        self.pods_lock = threading.Lock()
        self.client: KubeClient | None = None
        self.cm_exists: dict[str, bool] = {}
        self.deleted_pods: set[str] = set()
        self.deleted_jobs: set[str] = set()
        self.restart_lock = threading.Lock()

    # -- lifecycle -----------------------------------------------------------------------

    def run(self) -> Result:
        self.root.mkdir(parents=True, exist_ok=True)
        threads: list[threading.Thread] = []
        try:
            self._start_all()
            threads = [threading.Thread(target=t, name=t.__name__, daemon=True) for t in
                       (self._watch_pods, self._sample_processes)]
            for t in threads:
                t.start()
            threading.Thread(target=self._supervise, name="supervise", daemon=True).start()
            chaos = threading.Thread(target=self._chaos, name="chaos", daemon=True)
            chaos.start()
            self._workload(time.monotonic() + self.seconds)
            self.faults_over.set()
            chaos.join(120)
            self._ensure_all_up()
            self._settle_and_check()
        finally:
            self.stop.set()
            for t in threads:
                t.join(10)
            self._teardown()
        return self.result

    def _start_all(self) -> None:
        self.server.start()
        self._wait_server()
        self.client = _client_without_retries(self.kubeconfig)
        for name in GPU_QUEUES:
            self.client.create(QUEUES.collection(), queue_body(name, 1))
        self.client.create(QUEUES.collection(), queue_body(STEADY_QUEUE, 0))
        self.controllers.start()
        self.agent.start()
        self._wait(lambda: self._node_ready(), 60, "the agent's node Ready")

    def _node_ready(self) -> bool:
        node = self._get(f"/api/v1/nodes/{NODE}")
        conditions = ((node or {}).get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

    def _ensure_all_up(self) -> None:
        with self.restart_lock:
            for component in (self.server, self.controllers, self.agent):
                if not component.alive():
                    component.start()
        self._wait_server()

    def _teardown(self) -> None:
        with self.restart_lock:
            for component in (self.agent, self.controllers, self.server):
                with contextlib.suppress(Exception):
                    component.stop()
        for p in pod_processes(self.trial):  # only this trial's pods carry its mark
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGKILL)
        if self.client is not None:
            self.client.close()

    def _wait_server(self, timeout: float = 60.0) -> None:
        def ready() -> bool:
            if not self.kubeconfig.exists():
                return False
            try:
                probe = KubeClient.from_kubeconfig(str(self.kubeconfig), pool_size=1)
                try:
                    probe.request("GET", "/readyz", timeout=5)
                finally:
                    probe.close()
            except Exception:
                return False
            return True

        self._wait(ready, timeout, "the API server ready")

    def _wait(self, check: Any, timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = check()
            if value:
                return value
            time.sleep(0.1)
        raise RuntimeError(f"timed out waiting for {what} (logs under {self.root})")

    def _get(self, path: str) -> dict[str, Any] | None:
        assert self.client is not None
        try:
            return self.client.get(path)
        except Exception:
            return None

    # -- chaos ---------------------------------------------------------------------------

    def _chaos(self) -> None:
        rng = random.Random(self.seed * 7919 + 1)
        order: list[Component] = []
        while not self.faults_over.wait(rng.uniform(*self.kill_every)):
            if not order:  # each of the three in turn, in a shuffled order each round
                order = [self.server, self.controllers, self.agent]
                rng.shuffle(order)
            victim = order.pop()
            with self.ledger.lock:
                before = self.ledger.max_acked_rv
            with self.restart_lock:
                victim.kill9()
                self.result.kills[victim.name] += 1
                time.sleep(rng.uniform(0.05, 1.0))
                victim.start()
            if victim is self.server:
                self._wait_server()
                self._check_rv_after_restart(before)

    def _supervise(self) -> None:
        """Start again a component that exited by itself (an agent that could not reach
        the API while it restarted), as `gpushare up` does."""
        while not self.stop.wait(1.0):
            for component in (self.controllers, self.agent):
                with self.restart_lock:
                    if not component.alive():
                        self.result.exits[component.name] += 1
                        component.start()

    def _check_rv_after_restart(self, before: int) -> None:
        assert self.client is not None
        for _ in range(50):
            try:
                rv = int(self.client.list(CONFIGMAPS.collection(NAMESPACE))["metadata"]
                         ["resourceVersion"])
            except Exception:
                time.sleep(0.1)
                continue
            if rv < before:
                self.result.violations.append(
                    f"after a restart the server's resourceVersion is {rv}, below {before} "
                    "which it had acknowledged before the kill")
            return

    # -- workload ------------------------------------------------------------------------

    def _workload(self, until: float) -> None:
        rng = random.Random(self.seed)
        live: list[str] = []   # pods we created and not deleted
        jobs: list[str] = []
        n = 0
        while time.monotonic() < until:
            n += 1
            roll = rng.random()
            if roll < 0.30 and len(live) + 2 * len(jobs) < MAX_LIVE_PODS:
                self._create_pod(rng, f"p{n}", live)
            elif roll < 0.45 and live:
                self._delete_pod(live.pop(rng.randrange(len(live))))
            elif roll < 0.55 and len(jobs) < 2:
                job = gang_body(self.trial, f"gang{n}", rng.choice(GPU_QUEUES), 2,
                                rng.choice(("0.5", "0.25")))
                self._write("create", lambda job=job: self._client().create(
                    JOBS.collection(NAMESPACE), job))
                jobs.append(f"gang{n}")
            elif roll < 0.60 and jobs:
                name = jobs.pop(rng.randrange(len(jobs)))
                self.deleted_jobs.add(name)
                self._write("delete", lambda name=name: self._client().delete(
                    JOBS.item(name, NAMESPACE), propagation="Background"))
            else:
                self._write_configmap(rng, n)
            time.sleep(rng.uniform(0.05, 0.25))

    def _client(self) -> KubeClient:
        assert self.client is not None
        return self.client

    def _write(self, verb: str, call: Any) -> tuple[str, dict[str, Any] | None]:
        """Send one write; 'acked', 'refused' or 'unknown'."""
        try:
            obj = call()
        except Exception as error:
            if _definite_refusal(error):
                self.ledger.refused += 1
                if not isinstance(error, ApiError):
                    time.sleep(0.2)  # the server is down: wait a little for its restart
                return "refused", None
            self.ledger.unknown += 1
            return "unknown", None
        self.ledger.ack(obj if verb != "delete" else None)
        return "acked", obj

    def _create_pod(self, rng: random.Random, name: str, live: list[str]) -> None:
        kind = rng.random()
        if kind < 0.25:
            body = pod_body(self.trial, name, STEADY_QUEUE, None)
        else:
            gpu = rng.choice(("0.25", "0.5", "0.5", "1"))
            priority = "build" if rng.random() < 0.2 else "train"
            body = pod_body(self.trial, name, rng.choice(GPU_QUEUES), gpu, priority)
        outcome, obj = self._write("create", lambda: self._client().create(
            PODS.collection(NAMESPACE), body))
        if outcome == "refused":
            return
        live.append(name)
        if outcome == "acked" and obj is not None and body["metadata"]["labels"][
                "kai.scheduler/queue"] == STEADY_QUEUE:
            self.ledger.steady_pods[name] = obj["metadata"]["uid"]

    def _delete_pod(self, name: str) -> None:
        self.deleted_pods.add(name)
        if name in self.ledger.steady_pods:
            self.ledger.steady_deleted.add(name)
        self._write("delete", lambda: self._client().delete(PODS.item(name, NAMESPACE)))

    def _write_configmap(self, rng: random.Random, n: int) -> None:
        """Create, replace or delete one of a few ConfigMaps only this workload writes."""
        name = f"cm{rng.randrange(CONFIGMAP_KEYS)}"
        allowed = self.ledger.cm_allowed.setdefault(name, {None})
        value: str | None = None if rng.random() < 0.15 else f"v{n}"
        client = self._client()
        if value is None:
            outcome, obj = self._write("delete", lambda: client.delete(
                CONFIGMAPS.item(name, NAMESPACE)))
        else:
            body = {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": NAMESPACE}, "data": {"v": value}}
            calls = [lambda: client.create(CONFIGMAPS.collection(NAMESPACE), body),
                     lambda: client.replace(CONFIGMAPS.item(name, NAMESPACE), body)]
            if self.cm_exists.get(name):
                calls.reverse()
            outcome, obj = self._write("update", calls[0])
            if outcome == "refused":  # 409: it exists; 404: it does not. Both are answers.
                outcome, obj = self._write("update", calls[1])
        if outcome == "acked":
            self.ledger.cm_allowed[name] = {value}
            self.ledger.cm_acked_rv[name] = (
                int(obj["metadata"]["resourceVersion"]) if value is not None and obj else None)
            self.cm_exists[name] = value is not None
        elif outcome == "unknown":
            allowed.add(value)
            self.cm_exists[name] = value is not None

    # -- monitors ------------------------------------------------------------------------

    def _watch_pods(self) -> None:
        """Keep `self.pods` current through list + watch, re-listing after each break."""
        client = KubeClient.from_kubeconfig(str(self.kubeconfig), pool_size=2)
        try:
            while not self.stop.is_set():
                try:
                    listed = client.list(PODS.collection(NAMESPACE))
                except Exception:
                    self.stop.wait(0.2)
                    continue
                with self.pods_lock:
                    self.pods = {p["metadata"]["name"]: p for p in listed["items"]}
                    self._check_bookings()
                rv = listed["metadata"]["resourceVersion"]
                with contextlib.suppress(Exception):
                    for event in client.watch(PODS.collection(NAMESPACE), rv,
                                              timeout_seconds=30):
                        if self.stop.is_set():
                            return
                        self._on_pod_event(event)
        finally:
            client.close()

    def _on_pod_event(self, event: dict[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            raise RuntimeError(f"watch ended: {obj}")  # re-list
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            return
        name = obj["metadata"]["name"]
        self._trace(kind, obj)
        with self.pods_lock:
            if kind == "DELETED":
                self.pods.pop(name, None)
                self._note_deleted(obj)
            else:
                self.pods[name] = obj
            self._check_bookings()

    def _trace(self, kind: str, obj: dict[str, Any]) -> None:
        """One line per pod event in `pods.jsonl`: to read after a failed run."""
        meta, ann = obj["metadata"], obj["metadata"].get("annotations") or {}
        line = {"t": round(time.time(), 3), "type": kind, "name": meta["name"],
                "rv": meta.get("resourceVersion"), "node": (obj.get("spec") or {}).get(
                    "nodeName"), "gpus": ann.get("gpushare.io/gpu-indices"),
                "portion": ann.get("gpushare.io/gpu-portion"),
                "deleting": bool(meta.get("deletionTimestamp")),
                "phase": (obj.get("status") or {}).get("phase")}
        with (self.root / "pods.jsonl").open("a") as f:
            f.write(json.dumps(line) + "\n")

    def _note_deleted(self, obj: dict[str, Any]) -> None:
        """Count the pods the controllers deleted (evictions), not those the workload did."""
        meta = obj["metadata"]
        job = (meta.get("labels") or {}).get("job-name")
        if meta["name"] not in self.deleted_pods and job not in self.deleted_jobs:
            self.result.evictions += 1

    def _check_bookings(self) -> None:
        self.result.booking_checks += 1
        for gpu, holders in booked_overcommit(self.pods).items():
            self.result.violations.append(f"GPU {gpu} booked past one: {holders}")

    def _sample_processes(self) -> None:
        while not self.stop.wait(0.02):
            processes = pod_processes(self.trial)
            self.result.samples += 1
            for gpu, holders in overcommitted(processes).items():
                self.result.violations.append(
                    f"GPU {gpu} over-committed by running processes: {holders}")
            per_uid = Counter(p.uid for p in processes)
            for uid, count in per_uid.items():
                if count > 1:
                    names = sorted({p.pod for p in processes if p.uid == uid})
                    self.result.violations.append(
                        f"pod {names} (uid {uid}) has {count} processes at once")

    # -- the end -------------------------------------------------------------------------

    def _settle_and_check(self) -> None:
        deadline = time.monotonic() + self.settle_timeout
        problems: list[str] = []
        while time.monotonic() < deadline:
            problems = self._end_state_problems()
            if not problems:
                break
            time.sleep(0.5)
        self.result.violations.extend(problems)
        self.result.violations.extend(self._lost_writes())
        self.result.writes = self.ledger.acked
        self.result.unknown_writes = self.ledger.unknown
        self.result.refused_writes = self.ledger.refused
        # the same fault seen by many samples is one finding, listed once
        self.result.violations = list(dict.fromkeys(self.result.violations))

    def _end_state_problems(self) -> list[str]:
        client = self._client()
        try:
            pods = client.list(PODS.collection(NAMESPACE))["items"]
        except Exception as error:
            return [f"listing pods failed: {error}"]
        processes = pod_processes(self.trial)
        by_uid: dict[str, list[PodProcess]] = defaultdict(list)
        for p in processes:
            by_uid[p.uid].append(p)
        problems: list[str] = []
        refused: list[str] = []
        running = pending = 0
        uids = set()
        for pod in pods:
            name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
            uids.add(uid)
            status = pod.get("status") or {}
            count = len(by_uid.get(uid, ()))
            if pod["metadata"].get("deletionTimestamp"):
                problems.append(f"pod {name} is still being deleted")
            elif pod["spec"].get("nodeName"):
                if status.get("phase") == "Failed" and status.get("reason") == OVERCOMMITTED \
                        and count == 0:
                    refused.append(f"pod {name}: {status.get('message')}")
                    problems.append(f"pod {name} bound but refused by the agent's ledger: "
                                    f"{status.get('message')}")
                elif status.get("phase") != "Running" or count != 1:
                    problems.append(f"pod {name} bound: phase {status.get('phase')} "
                                    f"({status.get('reason')}: {status.get('message')}; "
                                    f"containers {status.get('containerStatuses')}), "
                                    f"{count} processes (want Running, 1)")
                else:
                    running += 1
                restarts = sum(c.get("restartCount") or 0
                               for c in status.get("containerStatuses") or ())
                if restarts:
                    # `sleep 3600` never ends by itself: a restart means a kill took it
                    problems.append(f"pod {name} restarted {restarts} time(s): its process "
                                    f"was killed ({status.get('containerStatuses')})")
            elif _pending_reason(pod) and count == 0:
                pending += 1
            else:
                problems.append(f"pod {name} pending without a reason or with {count} "
                                f"processes: {status}")
        for uid, procs in by_uid.items():
            if uid not in uids:
                problems.append(f"process {procs[0].pid} of pod {procs[0].pod} (uid {uid}) "
                                "runs but the pod does not exist")
        self.result.running, self.result.pending = running, pending
        self.result.ledger_refusals = refused
        return problems

    def _lost_writes(self) -> list[str]:
        client = self._client()
        lost: list[str] = []
        for name, allowed in sorted(self.ledger.cm_allowed.items()):
            obj = client.get(CONFIGMAPS.item(name, NAMESPACE))
            value = None if obj is None else (obj.get("data") or {}).get("v")
            if value not in allowed:
                lost.append(f"ConfigMap {name} is {value!r}; acknowledged writes allow only "
                            f"{sorted(allowed, key=str)}")
                continue
            acked_rv = self.ledger.cm_acked_rv.get(name)
            if obj is not None and len(allowed) == 1 and acked_rv and int(
                    obj["metadata"]["resourceVersion"]) != acked_rv:
                lost.append(f"ConfigMap {name} has resourceVersion "
                            f"{obj['metadata']['resourceVersion']}, acknowledged {acked_rv}")
        for name, uid in sorted(self.ledger.steady_pods.items()):
            if name in self.ledger.steady_deleted:
                continue
            obj = client.get(PODS.item(name, NAMESPACE))
            if obj is None or obj["metadata"]["uid"] != uid:
                lost.append(f"pod {name} (uid {uid}, create acknowledged) is gone")
        return lost


def _pending_reason(pod: dict[str, Any]) -> str:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("message") or condition.get("reason") or "")
    return ""


def write_json(path: Path, results: list[Result]) -> None:
    path.write_text(json.dumps([{**r.__dict__, "kills": dict(r.kills),
                                 "exits": dict(r.exits)} for r in results], indent=1))
