"""GPU share enforcement on a real NVIDIA GPU, through the agent's own pod-runner code.

    PYTHONPATH=src python3 tests/gpu/share_experiment.py --out DIR [--seconds 20]

Phases (each "pod" is `matmul_worker.py`, run by `PodSupervisor` with the env and limits the
agent computes from the scheduler's binding annotations):

  A  one pod with the whole GPU, no MPS                       -> baseline TFLOP/s
  B  one pod at 0.33 under MPS, alone                         -> does the SM cap hold?
  C  three pods at 0.33 under MPS at once, holding 2/4/6 GiB  -> split, sum, NVML attribution
  D  two pods at 0.33 + one at 0.33 allocating past its share -> MPS memory limit
     (it raises PyTorch's memory fraction back to 1 first, so MPS is what refuses)
  E  watchdog only (no MPS): one pod holding past its share   -> killed, GPUMemoryExceeded
     (it raises PyTorch's memory fraction back to 1 first, ignoring the cooperative hook)
  F  no MPS, PyTorch hook: a 0.33 pod allocating past its share -> PyTorch's allocator refuses

Writes `gpu_share_results.json` and `gpu_share_summary.md` to DIR and prints the summary.
Needs torch, nvidia-ml-py and psutil; not the kubernetes client.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gpushare.agent.gpu.enforcement import choose
from gpushare.agent.gpu.gpu_share import share_from_annotations
from gpushare.agent.gpu.mps import MpsManager
from gpushare.agent.gpu.nvml import PynvmlBackend, probe_inventory
from gpushare.agent.node.inventory import GpuInventory
from gpushare.agent.runtime.logstore import log_path
from gpushare.agent.runtime.monitor import GpuMonitor, WatchedPod
from gpushare.agent.runtime.planning import make_planner
from gpushare.agent.runtime.supervisor import PodSupervisor, SupervisorConfig

WORKER = Path(__file__).resolve().parent / "matmul_worker.py"
PASS_ENV = ("PATH", "HOME", "LANG", "LD_LIBRARY_PATH", "PYTHONPATH")
PASS_PREFIXES = ("NCCL_", "NVSHMEM_", "TORCH_SYMM")


class Recorder:
    """Stands in for the API: keeps the statuses the supervisor reports."""

    def __init__(self) -> None:
        self.statuses: list[dict[str, Any]] = []

    def report(self, status: dict[str, Any]) -> None:
        self.statuses.append(status)

    def terminated(self) -> None:
        pass


class NoValues:
    def config_map(self, namespace: str, name: str) -> None:
        return None

    def secret(self, namespace: str, name: str) -> None:
        return None


def make_pod(name: str, portion: float, memory_mib: int, args: list[str]) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "experiment",
            "uid": f"uid-{name}",
            "annotations": {
                "gpushare.io/gpu-indices": "0",
                "gpushare.io/gpu-portion": f"{portion:g}",
                "gpushare.io/gpu-memory-mib": str(memory_mib),
            },
        },
        "spec": {
            "nodeName": "gpu-node",
            "restartPolicy": "Never",
            "containers": [
                {"name": "main", "command": [sys.executable, str(WORKER), *args]}
            ],
        },
    }


def runtime_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k in PASS_ENV or k.startswith(PASS_PREFIXES)}


def run_phase(
    label: str,
    pods: list[dict[str, Any]],
    inventory: GpuInventory,
    nvml: PynvmlBackend,
    mps: MpsManager | None,
    data_dir: Path,
    timeout_s: float,
) -> dict[str, Any]:
    """Start the pods through PodSupervisor, watch them with the GPU monitor, collect results."""
    watched: list[WatchedPod] = []
    recorders: dict[str, Recorder] = {}
    for pod in pods:
        share = share_from_annotations(pod["metadata"]["annotations"], inventory)
        planner = make_planner(pod, share, runtime_env(), NoValues(), mps)

        name = pod["metadata"]["name"]
        recorders[name] = Recorder()
        directory = data_dir / label / name
        supervisor = PodSupervisor(
            pod, directory, planner, recorders[name], SupervisorConfig(poll_s=0.1)
        )
        watched.append(WatchedPod(f"experiment/{name}", supervisor, share))
    monitor = GpuMonitor(nvml, inventory, lambda: watched)
    for w in watched:
        w.supervisor.start()
    peak: dict[str, dict[str, int]] = {}
    raw_processes: list[dict[str, Any]] = []
    killed: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = monitor.once()
        for key, usage in result.usage.items():
            entry = peak.setdefault(key, {"memoryMiB": 0, "smUtil": 0})
            entry["memoryMiB"] = max(entry["memoryMiB"], sum(usage.memory_mib.values()))
            entry["smUtil"] = max(entry["smUtil"], max(usage.sm_percent.values(), default=0))
        for v in result.killed:
            killed.append({"pod": v.pod, "message": v.message})
        if len(raw_processes) < 40:
            raw_processes.append(
                {
                    "t": round(time.time(), 1),
                    "processes": [
                        {"pid": p.pid, "usedMiB": p.used_bytes >> 20,
                         "pod": GpuMonitor.owner_lookup(watched)(p.pid)}
                        for p in nvml.compute_processes(0)
                    ],
                }
            )
        phases = [r.statuses[-1]["phase"] if r.statuses else "Pending" for r in recorders.values()]
        if all(p in ("Succeeded", "Failed") for p in phases):
            break
        time.sleep(0.5)
    out: dict[str, Any] = {"pods": {}, "killed": killed, "nvml_samples": raw_processes[-6:]}
    for w in watched:
        name = w.key.split("/", 1)[1]
        w.supervisor.stop(5)
        w.supervisor.wait(30)
        final = recorders[name].statuses[-1] if recorders[name].statuses else {}
        state = (final.get("containerStatuses") or [{}])[0].get("state", {})
        log_text = log_path(w.supervisor.directory, "main", 0).read_text(errors="replace")
        result_line = {}
        for line in log_text.splitlines():
            if line.startswith("{"):
                try:
                    result_line = json.loads(line)
                except ValueError:
                    continue
        out["pods"][name] = {
            "phase": final.get("phase"),
            "reason": final.get("reason"),
            "message": final.get("message"),
            "terminated": state.get("terminated"),
            "result": {k: v for k, v in result_line.items() if k != "env"},
            "env": result_line.get("env"),
            "nvml_peak": peak.get(w.key),
            "log_tail": log_text[-600:],
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/gpushare-experiment"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(args.data_dir, ignore_errors=True)
    args.data_dir.mkdir(parents=True)
    secs = args.seconds
    started = time.time()

    nvml = PynvmlBackend()
    inventory = probe_inventory(nvml)
    gpu = inventory.devices[0]
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "gpu": {"product": gpu.product, "memoryMiB": gpu.memory_mib, "uuid": gpu.uuid,
                "count": inventory.count},
        "driver": nvml.driver_version(),
        "mps_control": shutil.which("nvidia-cuda-mps-control"),
        "uid": os.getuid(),
        "phases": {},
    }
    third_mib = int(gpu.memory_mib * 0.33)
    over_gib = round(third_mib / 1024 * 1.3)  # 30% past a third of the GPU
    print(f"GPU {gpu.product} {gpu.memory_mib} MiB, driver {results['driver']}, "
          f"MPS control: {results['mps_control']}", flush=True)

    def save() -> None:
        (args.out / "gpu_share_results.json").write_text(json.dumps(results, indent=1))

    worker = ["--seconds", str(secs)]
    # A: whole GPU, no MPS
    results["phases"]["A_whole_gpu_alone"] = run_phase(
        "A", [make_pod("whole", 1.0, gpu.memory_mib, worker)], inventory, nvml, None,
        args.data_dir, secs + 90)
    save()
    # E first among the non-MPS ones: watchdog only, one pod holding past its share
    results["phases"]["E_watchdog_over_share"] = run_phase(
        "E",
        [
            make_pod("steady", 0.33, third_mib, worker),
            make_pod("greedy", 0.33, third_mib,
                     ["--alloc-gib", str(over_gib), "--hold-seconds", str(secs + 30),
                      "--seconds", "1", "--undo-fraction"]),
        ],
        inventory, nvml, None, args.data_dir, secs + 120)
    save()
    results["phases"]["F_torch_hook_over_share"] = run_phase(
        "F",
        [make_pod("capped", 0.33, third_mib,
                  ["--alloc-gib", str(over_gib), "--hold-seconds", "5", "--seconds", "1"])],
        inventory, nvml, None, args.data_dir, 120)
    save()
    # MPS from here on, chosen the way the agent chooses it
    enforcement = choose("auto", inventory, True,
                         lambda: MpsManager(inventory.devices, args.data_dir / "mps"))
    results["enforcement"] = enforcement.annotation
    results["enforcement_notes"] = enforcement.notes
    mps = enforcement.mps
    save()
    if mps is not None:
        results["phases"]["B_third_alone_mps"] = run_phase(
            "B", [make_pod("solo", 0.33, third_mib, worker)], inventory, nvml, mps,
            args.data_dir, secs + 90)
        save()
        t0 = time.time() + 30
        results["phases"]["C_three_thirds_mps"] = run_phase(
            "C",
            [
                make_pod(f"third-{i}", 0.33, third_mib,
                         [*worker, "--hold-gib", str(2 * (i + 1)), "--start-at", str(t0)])
                for i in range(3)
            ],
            inventory, nvml, mps, args.data_dir, secs + 120)
        save()
        t0 = time.time() + 30
        results["phases"]["D_mps_over_share"] = run_phase(
            "D",
            [
                make_pod("ok-0", 0.33, third_mib, [*worker, "--start-at", str(t0)]),
                make_pod("ok-1", 0.33, third_mib, [*worker, "--start-at", str(t0)]),
                make_pod("too-big", 0.33, third_mib,
                         ["--alloc-gib", str(over_gib), "--hold-seconds", "5", "--seconds", "1",
                          "--undo-fraction"]),
            ],
            inventory, nvml, mps, args.data_dir, secs + 120)
        save()
        for daemon in mps.daemons.values():
            for name in ("control.log", "server.log"):
                path = daemon.log_directory / name
                if path.exists():
                    results.setdefault("mps_logs", {})[name] = path.read_text()[-3000:]
        mps.stop_all()
    results["wall_seconds"] = round(time.time() - started, 1)
    save()
    summary = summarize(results)
    (args.out / "gpu_share_summary.md").write_text(summary)
    print(summary, flush=True)
    with open(args.out / "nvidia_smi.txt", "w") as f:
        subprocess.run(["nvidia-smi"], stdout=f, stderr=subprocess.STDOUT, check=False)
    return 0


def summarize(results: dict[str, Any]) -> str:
    lines = [
        f"GPU share experiment, {results['date']}: {results['gpu']['product']} "
        f"({results['gpu']['memoryMiB']} MiB), driver {results['driver']}, "
        f"enforcement {results.get('enforcement')}",
        "",
        "| phase | pod | phase/reason | TFLOP/s | NVML peak MiB | note |",
        "| --- | --- | --- | ---: | ---: | --- |",
    ]
    for phase, data in results["phases"].items():
        total = 0.0
        for name, pod in data["pods"].items():
            tflops = pod["result"].get("tflops")
            total += tflops or 0.0
            peak = (pod.get("nvml_peak") or {}).get("memoryMiB", "")
            note = pod["result"].get("alloc") or ""
            if pod.get("message"):
                note = (note + " " + pod["message"]).strip()
            reason = pod.get("reason") or (pod.get("terminated") or {}).get("reason") or ""
            lines.append(
                f"| {phase} | {name} | {pod['phase']}/{reason} | {tflops or ''} | {peak} | "
                f"{note[:160]} |"
            )
        if len(data["pods"]) > 1:
            lines.append(f"| {phase} | **sum** | | {round(total, 1)} | | |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
