"""From the scheduler's binding annotations to the GPUs a pod gets and the limits it runs under.

Pure: no I/O. The scheduler writes `gpushare.io/gpu-indices`, `gpushare.io/gpu-portion` and
`gpushare.io/gpu-memory-mib` when it binds a pod (docs/contracts.md); this module turns them,
with the node's inventory, into the environment of the pod's processes and the numbers the
enforcement backends apply.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpushare.agent.node.inventory import GpuDevice, GpuInventory
from gpushare.api.contracts import (
    GPU_INDICES_ANNOTATION,
    GPU_MEMORY_MIB_ANNOTATION,
    GPU_PORTION_ANNOTATION,
    MILLI,
    BindingError,
    format_portion_milli,
    parse_indices,
    parse_portion_milli,
)

ANN_INDICES = GPU_INDICES_ANNOTATION
ANN_PORTION = GPU_PORTION_ANNOTATION
ANN_MEMORY_MIB = GPU_MEMORY_MIB_ANNOTATION


class GpuAssignmentError(ValueError):
    """The binding annotations are malformed or name GPUs this node does not have."""


@dataclass(frozen=True, slots=True)
class GpuShare:
    devices: tuple[GpuDevice, ...]
    portion_milli: int  # milli-GPUs of each listed GPU; 1000 for whole GPUs
    memory_mib: int  # allowed on each listed GPU

    @property
    def whole(self) -> bool:
        return self.portion_milli >= MILLI

    @property
    def portion(self) -> float:
        """The portion as a GPU count, for the numbers the backends take as floats."""
        return self.portion_milli / MILLI

    @property
    def thread_percentage(self) -> int:
        """The SM share as MPS takes it: whole percent, at least 1 (half up)."""
        return max(1, min(100, (self.portion_milli + 5) // 10))


def share_from_annotations(
    annotations: Mapping[str, str] | None, inventory: GpuInventory
) -> GpuShare | None:
    """The pod's GPU share, or None for a pod without GPUs."""
    annotations = annotations or {}
    raw_indices = (annotations.get(ANN_INDICES) or "").strip()
    if not raw_indices:
        return None
    try:
        indices = parse_indices(raw_indices)
    except BindingError as err:
        raise GpuAssignmentError(str(err)) from None
    if not indices:
        return None
    if len(set(indices)) != len(indices):
        raise GpuAssignmentError(
            f"metadata.annotations[{ANN_INDICES}]: {raw_indices!r} lists a GPU twice"
        )
    try:
        devices = tuple(inventory.by_index(i) for i in indices)
    except KeyError as exc:
        raise GpuAssignmentError(f"metadata.annotations[{ANN_INDICES}]: {exc.args[0]}") from None

    raw_portion = (annotations.get(ANN_PORTION) or "1").strip()
    try:
        portion = parse_portion_milli(raw_portion)
    except BindingError as err:
        raise GpuAssignmentError(str(err)) from None
    if not 0 < portion <= MILLI:
        raise GpuAssignmentError(
            f"metadata.annotations[{ANN_PORTION}]: {raw_portion!r} must be in (0, 1]"
        )

    smallest = min(d.memory_mib for d in devices)
    raw_memory = (annotations.get(ANN_MEMORY_MIB) or "").strip()
    if raw_memory:
        try:
            memory_mib = int(raw_memory)
        except ValueError:
            raise GpuAssignmentError(
                f"metadata.annotations[{ANN_MEMORY_MIB}]: {raw_memory!r} is not a whole MiB count"
            ) from None
        if memory_mib <= 0:
            raise GpuAssignmentError(
                f"metadata.annotations[{ANN_MEMORY_MIB}]: {raw_memory!r} must be positive"
            )
        memory_mib = min(memory_mib, smallest)
    else:
        memory_mib = smallest * portion // MILLI
    return GpuShare(devices=devices, portion_milli=portion, memory_mib=memory_mib)


@dataclass(frozen=True, slots=True)
class MpsTarget:
    """Where an MPS client connects: the pipe directory of its GPU's daemon."""

    pipe_directory: str


def share_env(
    share: GpuShare | None,
    mps: MpsTarget | None = None,
    declared: bool = False,
) -> dict[str, str]:
    """Environment variables for a pod's processes.

    Whole GPUs: plain visibility. A fraction adds cooperative framework hints and, when the
    GPU has an MPS daemon, the MPS limits (which the MPS server applies, not the framework).
    """
    if share is None:
        return {"CUDA_VISIBLE_DEVICES": "", "NVIDIA_VISIBLE_DEVICES": "void", "GPU_PORTION": "0"}
    uuids = ",".join(d.uuid for d in share.devices)
    env = {
        # The MPS server renumbers the devices it sees, so MPS clients name their GPU by
        # UUID (NVIDIA's advice); elsewhere the physical indices are what the contract says.
        "CUDA_VISIBLE_DEVICES": (
            uuids if mps is not None else ",".join(str(d.index) for d in share.devices)
        ),
        "NVIDIA_VISIBLE_DEVICES": uuids,
        "GPU_PORTION": format_portion_milli(min(share.portion_milli, MILLI)),
        "GPUSHARE_GPU_MEMORY_MIB": str(share.memory_mib),
    }
    if declared:
        env["GPUSHARE_GPUS_DECLARED"] = "true"
    if share.whole:
        return env
    fraction = share.memory_mib / min(d.memory_mib for d in share.devices)
    env.update(
        {
            # Cooperative: frameworks honour these only if the program lets them.
            "XLA_PYTHON_CLIENT_MEM_FRACTION": f"{fraction:.2f}",
            "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
            "TF_FORCE_GPU_ALLOW_GROWTH": "true",
            "GPUSHARE_TORCH_MEMORY_FRACTION": f"{fraction:.4f}",
        }
    )
    if mps is not None:
        env.update(mps_client_env(share, mps))
    return env


def mps_client_env(share: GpuShare, mps: MpsTarget) -> dict[str, str]:
    # The client sees exactly one device (its UUID), which is device 0 for it; NVIDIA's device
    # plugin found index-keyed limits applied where UUID-keyed ones were not.
    limits = ",".join(f"{i}={share.memory_mib}M" for i in range(len(share.devices)))
    return {
        "CUDA_MPS_PIPE_DIRECTORY": mps.pipe_directory,
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": limits,
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(share.thread_percentage),
    }


def watchdog_limit_mib(share: GpuShare, tolerance_fraction: float, tolerance_mib: int) -> int:
    """Memory a pod may hold on one of its GPUs before the watchdog kills it.

    NVML counts the CUDA context (a few hundred MiB) in a process's usage while the share does
    not, hence the slack.
    """
    return share.memory_mib + max(tolerance_mib, int(share.memory_mib * tolerance_fraction))
