"""GPU inventories as data: the devices a node has, and declared (fake) GPUs.

Shared by the node agent (which probes real GPUs through NVML or declares fake ones) and
the controllers that register declared nodes without an agent.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from gpushare.model.gpu_products import parse_gpu_spec


@dataclass(frozen=True, slots=True)
class GpuDevice:
    index: int
    uuid: str
    product: str  # label form, e.g. NVIDIA-H200 (spaces replaced by dashes)
    memory_mib: int
    sm_count: int


@dataclass(frozen=True, slots=True)
class GpuInventory:
    devices: tuple[GpuDevice, ...]
    declared: bool  # True: fake GPUs from --gpus, no NVML behind them

    @property
    def count(self) -> int:
        return len(self.devices)

    def by_index(self, index: int) -> GpuDevice:
        for device in self.devices:
            if device.index == index:
                return device
        raise KeyError(f"GPU index {index} is not on this node (has {self.count})")

    def to_json(self) -> str:
        return json.dumps(
            [
                {
                    "index": d.index,
                    "uuid": d.uuid,
                    "product": d.product,
                    "memoryMiB": d.memory_mib,
                }
                for d in self.devices
            ],
            separators=(",", ":"),
        )


def declared_uuid(node_name: str, index: int) -> str:
    """A stable fake UUID; the `GPU-declared-` prefix says plainly that no real GPU is behind it."""
    digest = hashlib.sha256(f"{node_name}/{index}".encode()).hexdigest()
    return f"GPU-declared-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:28]}"


def declared_gpus(node_name: str, spec: str) -> GpuInventory:
    """Fake GPUs for a machine without any: `--gpus 8xH100`."""
    count, product = parse_gpu_spec(spec)
    devices = tuple(
        GpuDevice(
            index=i,
            uuid=declared_uuid(node_name, i),
            product=product.product,
            memory_mib=product.memory_mib,
            sm_count=product.sm_count,
        )
        for i in range(count)
    )
    return GpuInventory(devices=devices, declared=True)
