"""The agent's own ledger of GPU slots: a bound pod that would over-commit a GPU is refused.

Binding is the scheduler's alone (the API refuses anyone else), but the agent does not take
it on trust: before it starts a pod it adds the pod's portion of each GPU to what its running
pods already hold and refuses the pod when a GPU would go past one whole GPU.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpushare.agent.gpu.gpu_share import GpuShare
from gpushare.api.contracts import MILLI, format_portion_milli

OVERCOMMITTED = "GPUOvercommitted"
#: The pod condition the ledger writes on a pod it refuses (status False, reason
#: GPUOvercommitted): `kubectl wait --for=condition=GPUSlotsAvailable=false pod/P`.
CONDITION = "GPUSlotsAvailable"


def held(shares: Iterable[GpuShare | None]) -> dict[int, int]:
    """Milli-GPUs of each GPU index held by `shares` (exact: no rounding to allow for)."""
    out: dict[int, int] = {}
    for share in shares:
        if share is None:
            continue
        for device in share.devices:
            out[device.index] = out.get(device.index, 0) + share.portion_milli
    return out


def overcommit(running: Iterable[GpuShare | None], new: GpuShare | None) -> str | None:
    """Why starting `new` beside `running` would over-commit a GPU, or None if it fits."""
    if new is None:
        return None
    taken = held(running)
    for device in new.devices:
        before = taken.get(device.index, 0)
        total = before + new.portion_milli
        if total > MILLI:
            return (f"GPU {device.index} would be over-committed: the pods running on it hold "
                    f"{format_portion_milli(before)} of it and this pod asks for "
                    f"{format_portion_milli(new.portion_milli)} (total "
                    f"{format_portion_milli(total)} > 1); the pod is not started")
    return None


def refused_conditions(message: str, now: str) -> list[dict[str, Any]]:
    """The conditions of a pod the ledger refused: scheduled, but its GPU slots are not
    available on this node, so it never initialises nor becomes ready."""
    def condition(kind: str, ok: bool, reason: str, text: str = "") -> dict[str, Any]:
        out: dict[str, Any] = {"type": kind, "status": "True" if ok else "False",
                               "lastProbeTime": None, "lastTransitionTime": now}
        if not ok:
            out["reason"] = reason
        if text:
            out["message"] = text
        return out

    return [condition("PodScheduled", True, ""),
            condition(CONDITION, False, OVERCOMMITTED, message),
            condition("Initialized", False, OVERCOMMITTED),
            condition("ContainersReady", False, OVERCOMMITTED),
            condition("Ready", False, OVERCOMMITTED)]
