"""The whole stack on a real GPU: API server, `gpushare agent` (NVML + MPS), pods via the API.

    PYTHONPATH=src python3 tests/gpu/control_plane_experiment.py --out DIR [--seconds 20]

Three pods at 0.33 of GPU 0 (bound by setting `spec.nodeName` and the scheduler's binding
annotations) run `matmul_worker.py` at once; a fourth at 0.33 tries to allocate past its share.
The script reads back, through the API only: the Node's enforcement and inventory, each pod's
phase and `gpushare.io/gpu-usage`, the node's usage totals, and the pods' logs (the API
server's log proxy to the agent). Writes `control_plane_results.json` to DIR.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from gpushare.cli.compose import api_server
from gpushare.kube.client import NODES, PODS, KubeClient

WORKER = Path(__file__).resolve().parent / "matmul_worker.py"
NODE = "gpu-node"
NS = "default"


def wait_for(check, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise TimeoutError("condition not reached in time")


def kill_mps_daemon_and_wait(agent_log: Path) -> dict[str, Any]:
    """SIGKILL the MPS control daemon the agent started; the agent should start another."""
    import psutil

    daemons = [p for p in psutil.process_iter(["name"])
               if p.info["name"] == "nvidia-cuda-mps-control"]
    if not daemons:
        return {"killed": None, "note": "no MPS control daemon running"}
    killed = daemons[0].pid
    daemons[0].kill()
    started = time.monotonic()
    try:
        wait_for(lambda: "restarted MPS daemons" in agent_log.read_text(errors="replace"), 60)
    except TimeoutError:
        return {"killed": killed, "restarted": False}
    again = [p.pid for p in psutil.process_iter(["name"])
             if p.info["name"] == "nvidia-cuda-mps-control"]
    return {"killed": killed, "restarted": True, "new_pids": again,
            "seconds": round(time.monotonic() - started, 1)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/gpushare-cp-experiment"))
    # a dry run off the GPU machine: --agent-arg=--gpus=1xH200 --worker fake.py
    parser.add_argument("--agent-arg", action="append", default=[])
    parser.add_argument("--worker", type=Path, default=WORKER)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(args.data_dir, ignore_errors=True)
    args.data_dir.mkdir(parents=True)
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}

    def save() -> None:
        (args.out / "control_plane_results.json").write_text(json.dumps(results, indent=1))

    server = api_server(args.data_dir / "api").start()
    kubeconfig = args.data_dir / "api" / "admin.kubeconfig"
    kube = KubeClient.from_kubeconfig(str(kubeconfig))
    logs = k8s_client.CoreV1Api(kube.api_client)  # logs are text, not JSON
    agent_log = open(args.out / "agent.log", "wb")  # noqa: SIM115
    agent = subprocess.Popen(
        [sys.executable, "-m", "gpushare.cli.main", "agent", "--kubeconfig", str(kubeconfig),
         "--node-name", NODE, "--data-dir", str(args.data_dir / "agent"), "--heartbeat", "1",
         *args.agent_arg],
        stdout=agent_log, stderr=subprocess.STDOUT,
    )
    try:
        node = wait_for(lambda: (n := kube.get(NODES.item(NODE))) and any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (n.get("status") or {}).get("conditions") or []) and n, 90)
        results["node"] = {
            "labels": node["metadata"]["labels"],
            "annotations": node["metadata"]["annotations"],
            "capacity": node["status"]["capacity"],
        }
        save()
        memory = int(node["metadata"]["labels"]["nvidia.com/gpu.memory"])
        third = int(memory * 0.33)
        share = {"gpushare.io/gpu-indices": "0", "gpushare.io/gpu-portion": "0.33",
                 "gpushare.io/gpu-memory-mib": str(third)}
        start_at = time.time() + 40
        pods = {
            f"third-{i}": ["--seconds", str(args.seconds), "--hold-gib", str(2 * (i + 1)),
                           "--start-at", str(start_at)]
            for i in range(3)
        }
        pods["too-big"] = ["--alloc-gib", str(round(third / 1024 * 1.3)), "--hold-seconds", "5",
                           "--seconds", "1", "--undo-fraction"]
        # The three thirds hold 0.99 of GPU 0; the greedy pod gets the last hundredth of its
        # compute but a third of its memory (what MPS and the watchdog enforce), so the agent's
        # slot ledger admits it and the memory limit is what stops it.
        annotations = {name: share for name in pods}
        annotations["too-big"] = {**share, "gpushare.io/gpu-portion": "0.01"}
        for name, worker_args in pods.items():
            kube.create(PODS.collection(NS), {
                "metadata": {"name": name, "annotations": annotations[name]},
                "spec": {"nodeName": NODE, "restartPolicy": "Never",
                         "containers": [{"name": "main", "image": "none",
                                         "command": [sys.executable, str(args.worker),
                                                     *worker_args]}]},
            })
        peak_usage: dict[str, int] = {}
        node_usage: list[Any] = []
        final: dict[str, dict[str, Any]] = {}
        deadline = time.monotonic() + args.seconds + 150
        while time.monotonic() < deadline and len(final) < len(pods):
            for name in pods:
                pod = kube.get(PODS.item(name, NS)) or {}
                usage = (pod.get("metadata") or {}).get("annotations", {}).get(
                    "gpushare.io/gpu-usage")
                if usage:
                    peak_usage[name] = max(peak_usage.get(name, 0), json.loads(usage)["memoryMiB"])
                if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                    final[name] = pod["status"]
            totals = (kube.get(NODES.item(NODE)) or {}).get("metadata", {}).get(
                "annotations", {}).get("gpushare.io/gpu-usage")
            if totals and (not node_usage or node_usage[-1] != totals):
                node_usage.append(totals)
            time.sleep(1)
        results["pods"] = {}
        for name in pods:
            try:
                raw = logs.read_namespaced_pod_log(name, NS,
                                                   _preload_content=False).data.decode()
            except ApiException as error:  # a pod the agent never started has no log
                raw = f"no log: {error.status} {error.reason}"
            line = next((json.loads(x) for x in reversed(raw.splitlines()) if x.startswith("{")),
                        {})
            status = final.get(name, {})
            results["pods"][name] = {
                "phase": status.get("phase"),
                "reason": status.get("reason"),
                "exitCode": ((status.get("containerStatuses") or [{}])[0].get("state", {})
                             .get("terminated", {}).get("exitCode")),
                "tflops": line.get("tflops"),
                "alloc": line.get("alloc"),
                "mps_env": {k: v for k, v in (line.get("env") or {}).items() if "MPS" in k},
                "peak_usage_annotation_mib": peak_usage.get(name),
            }
        results["node_usage_samples"] = [json.loads(x) for x in node_usage[-5:]]
        results["sum_tflops"] = round(sum(p["tflops"] or 0 for p in results["pods"].values()), 1)
        save()
        for name in pods:
            kube.delete(PODS.item(name, NS))
        wait_for(lambda: all(kube.get(PODS.item(n, NS)) is None for n in pods), 60)
        results["deleted"] = True
        save()
        results["mps_restart"] = kill_mps_daemon_and_wait(args.out / "agent.log")
        save()
    finally:
        agent.terminate()
        agent.wait(30)
        server.stop()
        save()
    print(json.dumps({k: v for k, v in results.items() if k != "node"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
