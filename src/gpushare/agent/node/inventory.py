"""What this node has: GPUs (probed through NVML or declared) and host CPU/memory."""

from __future__ import annotations

import os
from dataclasses import dataclass

from gpushare.model.gpu_inventory import GpuDevice, GpuInventory, declared_gpus, declared_uuid
from gpushare.model.gpu_products import PRODUCTS

__all__ = [
    "GpuDevice", "GpuInventory", "HostResources", "declared_gpus", "declared_uuid",
    "host_resources", "label_product", "sm_count_for",
]


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
