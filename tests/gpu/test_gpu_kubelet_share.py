"""GPU fractions on a kubelet node, on a real GPU (skipped where NVML finds none): the node
daemon's MPS control daemon and server limits, and a process started as the kubelet starts a
fractional pod's container, with the environment of its share ConfigMap. It is an MPS
client of its GPU's server; it gets its memory share and no more, even when it raises its
own limit (the server's holds)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpushare.agent.gpu.mps import MpsManager
from gpushare.agent.gpu.nvml import PynvmlBackend, probe_inventory
from gpushare.agent.kubelet_node import NodeWatchdog, node_pods
from gpushare.api.contracts import GpuBinding
from gpushare.api.kubelet_share import share_env

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600)]

# Allocates GiB after GiB up to the asked amount; one JSON line: how far it got.
WORKER = """
import json, os, sys, time
import torch
want = int(sys.argv[1])
held, got = [], 0
try:
    for _ in range(want):
        held.append(torch.empty(1 << 30, dtype=torch.uint8, device="cuda"))
        got += 1
    error = ""
except RuntimeError as e:
    error = str(e).splitlines()[0]
print(json.dumps({"gib": got, "error": error, "pid": os.getpid()}), flush=True)
time.sleep(float(sys.argv[2]))
"""


def _gpu_present() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
        return count > 0
    except Exception:
        return False


@pytest.fixture
def node(tmp_path: Path):
    if not _gpu_present():
        pytest.skip("NVML finds no GPU here")
    pytest.importorskip("torch")
    nvml = PynvmlBackend()
    inventory = probe_inventory(nvml)
    device = inventory.devices[0]
    mps = MpsManager((device,), tmp_path / "mps")
    assert mps.start_all() == []
    pod = {"metadata": {"name": "frac", "namespace": "ml", "uid": "u-1", "annotations": {
        "gpushare.io/gpu-indices": str(device.index), "gpushare.io/gpu-portion": "0.25"}},
        "spec": {"nodeName": "n"}, "status": {"phase": "Running"}}
    pods, errors = node_pods([pod], "n", inventory)
    assert errors == []
    watchdog = NodeWatchdog(nvml, inventory, lambda *a: None, mps, compute_policy="off")
    watchdog.once(pods)  # the server-side limits of the pod's share
    env = share_env(GpuBinding((device.index,), 250), device.memory_mib, str(tmp_path / "mps"))
    try:
        yield mps, device, env
    finally:
        mps.stop_all()


def _run(env: dict[str, str], gib: int, cheat: bool = False) -> dict:
    full = dict(os.environ, **env)
    if cheat:  # the pod raises its own limits: only the server's hold
        full["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = "0=1000000M"
        full["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = "100"
    # the kubelet's container sees only its GPU (NVIDIA_VISIBLE_DEVICES); a plain process
    # sees them all, so the MPS server's single device is what device 0 means here
    done = subprocess.run([sys.executable, "-c", WORKER, str(gib), "0"], env=full,
                          capture_output=True, text=True, timeout=300)
    assert done.stdout.strip(), done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_process_with_the_configmap_env_gets_its_share_and_no_more(node) -> None:
    _, device, env = node
    share_gib = device.memory_mib // 4 // 1024
    within = _run(env, max(share_gib - 2, 1))
    assert within["error"] == "" and within["gib"] == max(share_gib - 2, 1)
    over = _run(env, share_gib + 4)
    assert over["gib"] <= share_gib and "out of memory" in over["error"].lower()


def test_raising_its_own_limit_does_not_lift_the_servers(node) -> None:
    _, device, env = node
    share_gib = device.memory_mib // 4 // 1024
    over = _run(env, share_gib + 4, cheat=True)
    assert over["gib"] <= share_gib and "out of memory" in over["error"].lower()
