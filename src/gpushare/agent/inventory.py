"""What this node has: GPUs (probed through NVML or declared) and host CPU/memory."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass

from gpushare.model.gpu_products import PRODUCTS, parse_gpu_spec


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

    def as_dicts(self) -> list[dict[str, object]]:
        return [asdict(d) for d in self.devices]


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


def label_product(name: str) -> str:
    """NVML says 'NVIDIA H200'; the node label (like GPU feature discovery's) uses dashes."""
    return "-".join(name.split())


def sm_count_for(product: str) -> int:
    """SM count by product name when NVML cannot say (used only for SM shares in reports)."""
    normalized = product.lower()
    matches = [p for key, p in PRODUCTS.items() if key in normalized]
    if not matches:
        return 0
    # the longest key wins: "a100-40gb" over "a100"
    return max(matches, key=lambda p: len(p.key)).sm_count


@dataclass(frozen=True, slots=True)
class HostResources:
    cpu_cores: int
    memory_bytes: int


def host_resources() -> HostResources:
    import psutil

    return HostResources(
        cpu_cores=os.cpu_count() or 1,
        memory_bytes=int(psutil.virtual_memory().total),
    )
