"""The node daemon for kubelet nodes: which pods it watches, whose processes are whose (by
cgroup), the MPS server limits it sets and the evictions it asks for.

No GPU here: NVML is `FakeNvml` (named FAKE) and the MPS control daemon is the FAKE
`fake_mps/nvidia-cuda-mps-control`; the cgroup text of each process is given as the kubelet
writes it (a table stands in for /proc, whose processes here are not the kubelet's)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_nvml import FakeNvml

from gpushare.agent.gpu.mps import MpsManager
from gpushare.agent.gpu.nvml import GpuProcess, ProcessUtilization
from gpushare.agent.kubelet_node import (
    COMPUTE_EXCEEDED,
    MEMORY_EXCEEDED,
    NodeWatchdog,
    node_pods,
    pod_uid_from_cgroup,
    proc_cgroup,
)
from gpushare.agent.node.inventory import declared_gpus

FAKE = Path(__file__).resolve().parent / "fake_mps" / "nvidia-cuda-mps-control"
MIB = 1024 * 1024
UID_A = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
UID_B = "11111111-2222-3333-4444-555555555555"
NODE = "gpu-1"


def _pod(name: str, uid: str, indices: str, portion: str, node: str = NODE,
         phase: str = "Running") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ml", "uid": uid, "annotations": {
        "gpushare.io/gpu-indices": indices, "gpushare.io/gpu-portion": portion}},
        "spec": {"nodeName": node}, "status": {"phase": phase}}


def _cgroup_v1(uid: str) -> str:
    return (f"12:memory:/kubepods/burstable/pod{uid}/0123abcd\n"
            f"3:cpu,cpuacct:/kubepods/burstable/pod{uid}/0123abcd\n")


def _cgroup_systemd(uid: str) -> str:
    return ("0::/kubepods.slice/kubepods-besteffort.slice/"
            f"kubepods-besteffort-pod{uid.replace('-', '_')}.slice/cri-containerd-9f.scope\n")


def test_pod_uid_is_read_from_every_cgroup_layout() -> None:
    assert pod_uid_from_cgroup(_cgroup_v1(UID_A)) == UID_A
    assert pod_uid_from_cgroup(_cgroup_systemd(UID_A)) == UID_A
    assert pod_uid_from_cgroup("0::/user.slice/user-0.slice/session-1.scope\n") is None
    assert pod_uid_from_cgroup(f"0::/system.slice/pod{UID_A}.scope\n") is None  # not kubepods
    assert proc_cgroup(os.getpid())  # the real file is read
    assert proc_cgroup(2**22 + 1) is None  # past pid_max: no such process


def test_only_this_nodes_running_gpu_pods_are_watched() -> None:
    inventory = declared_gpus(NODE, "2xH100")
    pods, errors = node_pods([
        _pod("a", UID_A, "0", "0.5"),
        _pod("elsewhere", UID_B, "0", "0.5", node="gpu-2"),
        _pod("done", UID_B, "1", "0.5", phase="Succeeded"),
        _pod("bad", UID_B, "7", "0.5"),
        {"metadata": {"name": "cpu", "namespace": "ml", "uid": UID_B},
         "spec": {"nodeName": NODE}, "status": {"phase": "Running"}},
    ], NODE, inventory)
    assert [p.key for p in pods] == ["ml/a"]
    assert pods[0].share.portion_milli == 500
    assert len(errors) == 1 and errors[0].startswith("ml/bad:")
    assert "gpushare.io/gpu-indices" in errors[0]


def _watchdog(nvml: FakeNvml, evicted: list[tuple[str, str, str]], cgroups: dict[int, str],
              mps: MpsManager | None = None, **options: Any) -> NodeWatchdog:
    inventory = declared_gpus(NODE, "2xH100")
    return NodeWatchdog(nvml, inventory, lambda *a: evicted.append(a), mps,
                        read_cgroup=cgroups.get, **options)


def test_memory_over_the_share_is_evicted_once() -> None:
    inventory = declared_gpus(NODE, "2xH100")
    nvml = FakeNvml(list(inventory.devices))
    share_mib = inventory.devices[0].memory_mib // 4
    nvml.processes[0] = [GpuProcess(100, (share_mib + 200) * MIB),  # a: within tolerance
                         GpuProcess(200, (share_mib + 4096) * MIB),  # b: over
                         GpuProcess(300, 60000 * MIB)]  # not a kubelet pod: not ours
    cgroups = {100: _cgroup_v1(UID_A), 200: _cgroup_systemd(UID_B),
               300: "0::/system.slice/sshd.service\n"}
    evicted: list[tuple[str, str, str]] = []
    watchdog = _watchdog(nvml, evicted, cgroups, compute_policy="off")
    pods, _ = node_pods([_pod("a", UID_A, "0", "0.25"), _pod("b", UID_B, "0", "0.25")],
                        NODE, inventory)
    result = watchdog.once(pods)
    assert [(k, r) for k, r, _ in evicted] == [("ml/b", MEMORY_EXCEEDED)]
    assert f"its share is {share_mib} MiB" in evicted[0][2]
    assert result.evicted == evicted
    watchdog.once(pods)
    assert len(evicted) == 1  # asked once while the pod is still there


def test_a_refused_eviction_is_asked_again_next_pass() -> None:
    inventory = declared_gpus(NODE, "2xH100")
    nvml = FakeNvml(list(inventory.devices))
    nvml.processes[1] = [GpuProcess(200, inventory.devices[1].memory_mib * MIB)]
    tries: list[str] = []

    def refuse(key: str, reason: str, message: str) -> None:
        tries.append(key)
        raise RuntimeError("429: disruption budget")

    watchdog = NodeWatchdog(nvml, inventory, refuse, read_cgroup={200: _cgroup_v1(UID_B)}.get,
                            compute_policy="off")
    pods, _ = node_pods([_pod("b", UID_B, "1", "0.5")], NODE, inventory)
    assert watchdog.once(pods).evicted == []
    watchdog.once(pods)
    assert tries == ["ml/b", "ml/b"]


def test_compute_outside_mps_is_evicted_after_the_passes() -> None:
    inventory = declared_gpus(NODE, "2xH100")
    nvml = FakeNvml(list(inventory.devices))
    evicted: list[tuple[str, str, str]] = []
    watchdog = _watchdog(nvml, evicted, {100: _cgroup_v1(UID_A)}, compute_passes=3)
    pods, _ = node_pods([_pod("a", UID_A, "0", "0.3")], NODE, inventory)
    for stamp in range(1, 4):
        nvml.utilization[0] = [ProcessUtilization(100, 95, stamp)]
        watchdog.once(pods)
        assert len(evicted) == (1 if stamp == 3 else 0)
    assert evicted[0][:2] == ("ml/a", COMPUTE_EXCEEDED)
    assert "95%" in evicted[0][2] and "30%" in evicted[0][2]


def test_mps_servers_get_the_limits_of_the_pods_on_their_gpu(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_MPS_PYTHON", sys.executable)
    inventory = declared_gpus(NODE, "2xH100")
    mps = MpsManager(inventory.devices, tmp_path / "mps", str(FAKE))
    assert mps.start_all() == []
    try:
        assert mps.pipe_directory(1) == str(tmp_path / "mps" / "gpu1" / "pipe")
        watchdog = _watchdog(FakeNvml(list(inventory.devices)), [], {}, mps)
        pods, _ = node_pods([_pod("a", UID_A, "1", "0.25"), _pod("b", UID_B, "1", "0.5")],
                            NODE, inventory)
        result = watchdog.once(pods)
        assert result.mps_changed == [1]
        log = Path(mps.pipe_directory(1) or "") / "fake-mps-calls.log"
        calls = [line.split("\t", 2)[2] for line in log.read_text().splitlines()]
        half = inventory.devices[1].memory_mib // 2
        assert "set_default_active_thread_percentage 50" in calls
        assert any(c.startswith("set_default_device_pinned_mem_limit") and f"{half}M" in c
                   for c in calls)
        assert watchdog.once(pods).mps_changed == []  # unchanged limits are not sent again
    finally:
        mps.stop_all(wait_s=5)
