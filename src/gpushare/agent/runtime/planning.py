"""How the agent turns a bound pod into container plans: the one place that combines the
pod spec, the runtime environment, the GPU share (with MPS when the GPU has a daemon) and the
PyTorch hook. The agent and the GPU experiment both use it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpushare.agent.gpu.gpu_share import GpuShare, MpsTarget, share_env
from gpushare.agent.gpu.mps import MpsManager
from gpushare.agent.pods.podspec import ContainerPlan, ValueSource, plan_container
from gpushare.agent.runtime.supervisor import Planner

TORCH_HOOK_DIR = Path(__file__).resolve().parents[1] / "gpu" / "torch_hook"


def gpu_env_for(
    share: GpuShare | None, mps: MpsManager | None, declared: bool = False
) -> dict[str, str]:
    target = None
    # an MPS client reaches one daemon, so only a fraction of a single GPU uses MPS
    if share is not None and not share.whole and mps is not None and len(share.devices) == 1:
        pipe = mps.pipe_directory(share.devices[0].index)
        if pipe is not None:
            target = MpsTarget(pipe_directory=pipe)
    return share_env(share, target, declared=declared)


def make_planner(
    pod: dict[str, Any],
    share: GpuShare | None,
    runtime_env: dict[str, str],
    values: ValueSource,
    mps: MpsManager | None = None,
    declared: bool = False,
    address: str = "127.0.0.1",
    torch_hook: bool = True,
) -> Planner:
    gpu_env = gpu_env_for(share, mps, declared)
    prefixes = {}
    if torch_hook and share is not None and not share.whole:
        prefixes["PYTHONPATH"] = str(TORCH_HOOK_DIR)

    def plan(container: dict[str, Any], init: bool) -> ContainerPlan:
        current = dict(pod)
        status = dict(current.get("status") or {})
        # the pod's IP is the node's: fieldRefs to status.podIP work before the first report
        status.setdefault("podIP", address)
        status.setdefault("hostIP", address)
        status.setdefault("podIPs", [{"ip": address}])
        status.setdefault("hostIPs", [{"ip": address}])
        current["status"] = status
        group = (current.get("spec") or {}).get("initContainers" if init else "containers") or []
        position = next((i for i, c in enumerate(group) if c is container), 0)
        path = f"spec.{'initContainers' if init else 'containers'}[{position}]"
        return plan_container(
            current, container, path, runtime_env, gpu_env, values, init, prefixes
        )

    return plan
