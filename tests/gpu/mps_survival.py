"""MPS sharing that survives stopping, cheating and faulting pods, on a real GPU.

    PYTHONPATH=src python3 tests/gpu/mps_survival.py --out DIR [--cycles 30] [--control 10]
        [--mps-stop signal|terminate-client] [--phases probe,storm,cheat,fault,control]

Every "pod" is `rate_worker.py` (a bf16 matmul loop printing its TFLOP/s four times a
second), started by the agent's `PodSupervisor` in the agent's sandbox (bubblewrap or setuid
as root) with the environment, MPS daemon and server-side limits the agent gives a pod of
0.33 of GPU 0, and stopped through the agent's one stop path (`mps.end_gpu_work`, then the
signals) in the stop mode `--mps-stop` names, as the agent's option of that name: `signal`
(the default: signals alone) or `terminate-client` (MPS `terminate_client` first).

Phases:
  probe   the daemon's answers (server list/status/clients), cgroup dmem, what a pod's user
          may tell the control daemon
  storm   3 pods at 0.33; `--cycles` times a random one is stopped (delete, watchdog kill or
          node shutdown, in turn) and started again; the others must see no CUDA error and
          be back within 10 % of their rate within 5 s of each stop
  cheat   a pod alone at 0.33 honestly, then one that raises its thread percentage to 100
          and drops its memory limit (then allocates 60 GiB), then one that leaves MPS
          (`--escape`): the compute watchdog must evict it
  fault   2 pods + 1 that writes through a bad pointer: what the neighbours see, what the
          agent's fault handler finds and does, how long until all compute again
  control the storm's stops by signals alone whatever `--mps-stop` says, `--control` cycles

Writes `mps_survival.json` (everything) and `mps_survival.md` (the summary) to DIR.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpushare.agent.gpu.gpu_share import share_from_annotations
from gpushare.agent.gpu.mps import (
    STOP_MODES,
    STOP_SIGNAL,
    MpsManager,
    end_gpu_work,
    server_limits,
)
from gpushare.agent.gpu.nvml import PynvmlBackend, probe_inventory
from gpushare.agent.node.inventory import GpuInventory
from gpushare.agent.runtime import sandbox as sb
from gpushare.agent.runtime.gpufaults import FaultReport, MpsFaultHandler
from gpushare.agent.runtime.logstore import log_path
from gpushare.agent.runtime.monitor import GpuMonitor, WatchedPod
from gpushare.agent.runtime.planning import make_planner
from gpushare.agent.runtime.supervisor import PodSupervisor, SupervisorConfig

WORKER = Path(__file__).resolve().parent / "rate_worker.py"
PASS_ENV = ("PATH", "LANG", "LD_LIBRARY_PATH", "PYTHONPATH")
CONFIG = SupervisorConfig(poll_s=0.05, backoff_base_s=1.0, backoff_max_s=4.0, default_grace_s=5)


class Recorder:
    def __init__(self) -> None:
        self.statuses: list[dict[str, Any]] = []
        self.events: list[tuple[float, str, str]] = []

    def report(self, status: dict[str, Any]) -> None:
        self.statuses.append(status)

    def terminated(self) -> None:
        pass

    def event(self, reason: str, message: str, warning: bool = False) -> None:
        self.events.append((time.time(), reason, message))

    @property
    def phase(self) -> str:
        return self.statuses[-1].get("phase", "") if self.statuses else "Pending"


class NoValues:
    def config_map(self, namespace: str, name: str) -> None:
        return None

    def secret(self, namespace: str, name: str) -> None:
        return None


class Lab:
    """Pods of 0.33 of GPU 0 run the way the agent runs them."""

    def __init__(self, out: Path, sandbox: str = "auto", stop_mode: str = STOP_SIGNAL) -> None:
        self.out = out
        self.nvml = PynvmlBackend()
        self.inventory: GpuInventory = probe_inventory(self.nvml)
        self.gpu = self.inventory.devices[0]
        self.root = Path(tempfile.mkdtemp(prefix="gpushare-survival-"))
        self.data = self.root / "agent"
        self.pods_root = self.data / "pods"
        self.policy = sb.open_for_pods(sb.choose_policy(sandbox, [self.data]), self.data,
                                       self.pods_root)
        self.mps = MpsManager(self.inventory.devices[:1], sb.mps_base(self.data),
                              stop_mode=stop_mode)
        errors = self.mps.start_all()
        if errors:
            raise SystemExit(f"MPS did not start: {errors}")
        self.pods: dict[str, tuple[PodSupervisor, Recorder, Any]] = {}
        self.third_mib = int(self.gpu.memory_mib * 0.33)
        self.hook: Callable[[list[int]], object] | None = lambda g: end_gpu_work(self.mps, g)
        self.ended: list[dict[str, Any]] = []

    def release(self, pgids: list[int]) -> object:
        if self.hook is None:
            return None
        ended = self.hook(pgids)
        for e in ended or []:  # type: ignore[union-attr]
            self.ended.append({"t": time.time(), "server": e.server, "client": e.client,
                               "ok": e.ok, "answer": e.answer, "seconds": e.seconds})
        return ended

    def start(self, name: str, args: list[str], restart: str = "Never") -> PodSupervisor:
        pod = {"metadata": {"name": name, "namespace": "lab", "uid": f"uid-{name}",
                            "annotations": {"gpushare.io/gpu-indices": "0",
                                            "gpushare.io/gpu-portion": "0.33",
                                            "gpushare.io/gpu-memory-mib": str(self.third_mib)}},
               "spec": {"nodeName": "gpu", "restartPolicy": restart,
                        "containers": [{"name": "main",
                                        "command": [sys.executable, str(WORKER), *args]}]}}
        share = share_from_annotations(pod["metadata"]["annotations"], self.inventory)
        assert share is not None
        self.mps.apply_limits(server_limits([(0, share.thread_percentage, share.memory_mib)]))
        env = {k: v for k, v in os.environ.items()
               if k in PASS_ENV or k.startswith(("NCCL_", "NVSHMEM_", "TORCH_SYMM"))}
        planner = make_planner(pod, share, env, NoValues(), self.mps)
        directory = self.pods_root / "lab" / name
        pipe = self.mps.pipe_directory(0)
        state = sb.new_state(self.policy, directory, name, sb.ids_in_use(self.pods_root),
                             mps_gpu=0, devices=sb.gpu_devices(), writable=[pipe])
        sb.prepare(state, self.pods_root)
        recorder = Recorder()
        sup = PodSupervisor(pod, directory, planner, recorder, CONFIG, state,
                            before_signal=self.release)
        sup.start()
        self.pods[name] = (sup, recorder, share)
        return sup

    def lines(self, name: str) -> list[dict[str, Any]]:
        sup = self.pods[name][0]
        found: list[dict[str, Any]] = []
        for run in range(0, 8):
            path = log_path(sup.directory, "main", run)
            if not path.exists():
                break
            for raw in path.read_text(errors="replace").splitlines():
                if raw.startswith("{"):
                    try:
                        found.append({**json.loads(raw), "run": run})
                    except ValueError:
                        continue
        return found

    def rates(self, name: str, since: float = 0.0) -> list[tuple[float, float]]:
        return [(d["t"], d["rate"]) for d in self.lines(name) if "rate" in d and d["t"] >= since]

    def errors(self, name: str) -> list[dict[str, Any]]:
        return [d for d in self.lines(name) if "error" in d]

    def wait_rate(self, name: str, count: int = 1, timeout: float = 60.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.rates(name)) >= count:
                return True
            if self.pods[name][0].finished:
                return False
            time.sleep(0.1)
        return False

    def watched(self) -> list[WatchedPod]:
        return [WatchedPod(f"lab/{n}", s, share) for n, (s, _, share) in self.pods.items()]

    def stop_all(self) -> None:
        for sup, _, _ in self.pods.values():
            sup.stop(3)
        for sup, _, _ in self.pods.values():
            sup.wait(30)

    def close(self) -> None:
        self.stop_all()
        for daemon in self.mps.daemons.values():
            for log in ("control.log", "server.log"):
                path = daemon.log_directory / log
                if path.exists():
                    shutil.copy(path, self.out / f"mps_{log}")
        self.mps.stop_all()
        shutil.rmtree(self.root, ignore_errors=True)
        base = sb.mps_base(self.data).parent
        if base.parent == Path("/run/gpushare"):
            shutil.rmtree(base, ignore_errors=True)


def control_raw(lab: Lab, command: str, user: int | None = None) -> dict[str, Any]:
    daemon = lab.mps.daemons[0]
    argv = [daemon.binary]
    if user is not None:
        argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *argv]
    done = subprocess.run(argv, input=command + "\n", env=daemon.env(), capture_output=True,
                          text=True, timeout=10, check=False)
    return {"command": command, "user": user, "rc": done.returncode,
            "out": (done.stdout + done.stderr)[-500:]}


def probe(lab: Lab) -> dict[str, Any]:
    result: dict[str, Any] = {"uname": os.uname().release, "driver": lab.nvml.driver_version(),
                              "gpu": lab.gpu.product, "sandbox": lab.policy.describe()}
    with open("/proc/self/mounts") as f:
        result["cgroup_mounts"] = [m for m in f.read().splitlines() if "cgroup" in m]
    for path in ("/sys/fs/cgroup/cgroup.controllers", "/sys/fs/cgroup/dmem.capacity"):
        try:
            result[path] = Path(path).read_text().strip()
        except OSError as exc:
            result[path] = f"unreadable: {exc.strerror}"
    lab.start("probe", ["--seconds", "8"])
    lab.wait_rate("probe")
    raws = [control_raw(lab, "get_server_list")]
    servers = [int(x) for x in raws[0]["out"].split() if x.isdigit()]
    for spid in servers:
        raws += [control_raw(lab, f"get_server_status {spid}"),
                 control_raw(lab, f"get_client_list {spid}"),
                 control_raw(lab, "get_default_active_thread_percentage")]
    pod_uid = sb.ID_BASE  # the GPU's MPS uid: what a pod may say to the daemon
    raws += [control_raw(lab, "get_server_list", pod_uid),
             control_raw(lab, "get_default_active_thread_percentage", pod_uid),
             control_raw(lab, "set_default_active_thread_percentage 100", pod_uid),
             control_raw(lab, "get_default_active_thread_percentage")]
    result["control"] = raws
    result["servers"] = [vars(s) if hasattr(s, "__dict__") else
                         {"pid": s.pid, "status": s.status, "clients": list(s.clients)}
                         for s in lab.mps.servers(0)]
    lab.pods["probe"][0].wait_released(30)
    lab.mps.daemons[0].limits = None  # whatever the pod's user did, set them again
    return result


def storm(lab: Lab, cycles: int, label: str) -> dict[str, Any]:
    names = [f"{label}-{i}" for i in range(3)]
    current = dict.fromkeys(names, "")
    for n in names:
        current[n] = n
        lab.start(n, [])
    for n in names:
        lab.wait_rate(n, 8)
    time.sleep(2)
    t0 = time.time()
    steady = {n: statistics.median(r for _, r in lab.rates(n, t0 - 2)) for n in names}
    stops: list[dict[str, Any]] = []
    rng = random.Random(7)
    methods = ["delete", "watchdog-kill", "node-shutdown"]
    for i in range(cycles):
        slot = rng.choice(names)
        victim = current[slot]
        method = methods[i % 3]
        sup = lab.pods[victim][0]
        t_stop = time.time()
        if method == "delete":
            sup.stop(5)
        elif method == "watchdog-kill":
            sup.kill("GPUMemoryExceeded", "storm")
            sup.wait_released(30)
            sup.stop(0)  # a killed pod stays Failed until deleted
        else:
            sup.shutdown(5)
        sup.wait(30)
        stopped_in = time.time() - t_stop
        new = f"{slot}-r{i}"
        current[slot] = new
        lab.start(new, [])
        came_back = lab.wait_rate(new, 1, 30)
        time.sleep(max(0.0, t_stop + 5.5 - time.time()))
        stops.append({"cycle": i, "victim": victim, "method": method, "t": t_stop,
                      "stop_seconds": round(stopped_in, 2), "replacement_ran": came_back})
    time.sleep(1)
    # judge the neighbours: every run of every slot, at each stop it did not suffer
    runs = [n for n in lab.pods if n.startswith(label + "-")]
    # a run's own error after it was stopped is the stop (cudaErrorMpsClientTerminated)
    stopped_at = {s["victim"]: s["t"] for s in stops}
    deaths = {n: [e for e in lab.errors(n) if e["t"] < stopped_at.get(n, float("inf"))]
              for n in runs}
    deaths = {n: errors for n, errors in deaths.items() if errors}
    checks = []
    for s in stops:
        for n in runs:
            if n == s["victim"]:
                continue
            rates = lab.rates(n)
            if not rates or rates[0][0] > s["t"] - 0.5 or (lab.pods[n][0].finished and
                                                           rates[-1][0] < s["t"] + 5):
                continue  # this run was not running across the stop
            slot = n.split("-r")[0]
            window = [r for t, r in rates if s["t"] <= t <= s["t"] + 5]
            at5 = [r for t, r in rates if s["t"] + 4 <= t <= s["t"] + 5]
            ratio = (at5[-1] / steady[slot]) if at5 else 0.0
            checks.append({"cycle": s["cycle"], "pod": n, "min_ratio": round(
                min(window) / steady[slot], 3) if window else None, "ratio_at_5s": round(
                ratio, 3), "ok": ratio >= 0.9})
    lab.stop_all()
    return {"steady": steady, "stops": stops, "checks": checks, "deaths": deaths,
            "failed_checks": [c for c in checks if not c["ok"]],
            "neighbour_checks": len(checks)}


def cheat(lab: Lab) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, args in (("honest", ["--seconds", "6"]),
                       ("cheater", ["--seconds", "6", "--cheat", "--alloc-gib", "60"])):
        lab.start(name, args)
        lab.pods[name][0].wait_released(90)
        rates = [r for _, r in lab.rates(name)][4:]
        first = next((d for d in lab.lines(name) if "ready" in d), {})
        alloc = next((d["alloc"] for d in lab.lines(name) if "alloc" in d), None)
        out[name] = {"median_rate": statistics.median(rates) if rates else None,
                     "free_mib": first.get("free_mib"), "env": first.get("env"),
                     "alloc": alloc, "errors": lab.errors(name)}
    # leaving MPS: only NVML sees it; the compute watchdog evicts it
    monitor = GpuMonitor(lab.nvml, lab.inventory, lab.watched, compute_policy="evict",
                         mps_clients=lab.mps.clients)
    lab.start("escaper", ["--escape", "--seconds", "40"])
    samples = []
    t0 = time.time()
    killed = None
    while time.time() - t0 < 45 and lab.pods["escaper"][0].holds_gpu:
        result = monitor.once()
        samples.append({"t": round(time.time() - t0, 1),
                        "sm": {k: dict(u.sm_percent) for k, u in result.usage.items()},
                        "raw": [(s.pid, s.sm_percent) for s in
                                lab.nvml.process_utilization(0, 0)][-6:]})
        if result.compute_killed:
            killed = [v.message for v in result.compute_killed]
        time.sleep(1)
    rec = lab.pods["escaper"][1]
    out["escaper"] = {"phase": rec.phase, "reason": (rec.statuses[-1] if rec.statuses else {}
                                                     ).get("reason"),
                      "killed": killed, "seconds": round(time.time() - t0, 1),
                      "samples": samples[-8:], "env": next(
                          (d.get("env") for d in lab.lines("escaper") if "ready" in d), None)}
    return out


def fault(lab: Lab) -> dict[str, Any]:
    reports: list[FaultReport] = []
    handler = MpsFaultHandler(lab.mps, lab.watched, reports.append, stuck_s=15)
    for n in ("near-0", "near-1"):
        lab.start(n, [], restart="Always")
    for n in ("near-0", "near-1"):
        lab.wait_rate(n, 4)
    lab.start("faulty", ["--fault-after", "3"], restart="Never")
    t0 = time.time()
    statuses = []
    recovered_at = None
    while time.time() - t0 < 90:
        handler.once()
        servers = lab.mps.servers(0)
        statuses.append((round(time.time() - t0, 1), [(s.pid, s.status, len(s.clients))
                                                      for s in servers]))
        fresh = [n for n in ("near-0", "near-1")
                 if any(d.get("run", 0) > 0 for d in lab.lines(n) if "rate" in d)]
        if reports and len(fresh) == 2 and recovered_at is None:
            recovered_at = time.time() - t0
            break
        time.sleep(0.5)
    fault_line = next((d for d in lab.lines("faulty") if "fault" in d), None)
    out = {
        "fault_at": fault_line["t"] - t0 if fault_line else None,
        "faulty": {"lines": lab.lines("faulty")[-3:], "phase": lab.pods["faulty"][1].phase},
        "neighbours": {n: {"errors": lab.errors(n), "events": lab.pods[n][1].events[-4:],
                           "restarts": max((d.get("run", 0) for d in lab.lines(n)), default=0)}
                       for n in ("near-0", "near-1")},
        "reports": [r.as_dict() for r in reports],
        "recovered_after_s": recovered_at,
        "server_statuses": statuses[::4][-20:],
    }
    lab.stop_all()
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cycles", type=int, default=30)
    parser.add_argument("--control", type=int, default=10)
    parser.add_argument("--phases", default="probe,storm,cheat,fault,control")
    parser.add_argument("--mps-stop", choices=STOP_MODES, default=STOP_SIGNAL)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                               "mps_stop": args.mps_stop}
    ended: list[dict[str, Any]] = []

    def save() -> None:
        results["terminate_client_answers"] = ended[-40:]
        (args.out / "mps_survival.json").write_text(json.dumps(results, indent=1, default=str))

    # each phase (`name` or `name@sandbox`) gets a fresh daemon: a broken server stays behind
    for spec in args.phases.split(","):
        phase, _, mode = spec.partition("@")
        began = time.time()
        print(f"== {spec}", flush=True)
        lab = Lab(args.out, mode or "auto", args.mps_stop)
        try:
            if phase == "probe":
                results[spec] = probe(lab)
            elif phase == "storm":
                results[spec] = storm(lab, args.cycles, "s")
            elif phase == "cheat":
                results[spec] = cheat(lab)
            elif phase == "fault":
                results[spec] = fault(lab)
            elif phase == "control":
                lab.hook = None
                results[spec] = storm(lab, args.control, "c")
        except Exception as exc:  # record and go on to the next phase
            results[spec] = {"crashed": f"{type(exc).__name__}: {exc}"}
        finally:
            results[spec] = {**results.get(spec, {}), "sandbox": lab.policy.mode}
            ended.extend(lab.ended)
            lab.close()
            for log in ("control", "server"):
                source = args.out / f"mps_{log}.log"
                if source.exists():
                    source.rename(args.out / f"mps_{log}_{phase}_{mode or 'auto'}.log")
        results.setdefault("seconds", {})[spec] = round(time.time() - began, 1)
        save()
        print(json.dumps(results[spec], default=str)[:2000], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
