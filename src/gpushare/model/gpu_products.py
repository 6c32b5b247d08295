"""GPU products known by name, for nodes that declare GPUs instead of probing them.

A machine without GPUs (a laptop, CI) declares fake ones: ``8xH100`` means eight H100s.
The sizes are the vendors' published per-GPU memory, so that ``gpu-memory`` requests and
memory shares work out as they would on the real card.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The node label that names a node's GPU model (NVIDIA GPU feature discovery's key).
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"


@dataclass(frozen=True, slots=True)
class GpuProduct:
    key: str  # the short name users type: "H100"
    product: str  # what NVML reports and the `nvidia.com/gpu.product` label carries
    memory_mib: int  # memory of one GPU
    sm_count: int  # streaming multiprocessors, for SM shares


PRODUCTS: dict[str, GpuProduct] = {
    p.key.lower(): p
    for p in (
        GpuProduct("H200", "NVIDIA-H200", 143771, 132),
        GpuProduct("H100", "NVIDIA-H100-80GB-HBM3", 81559, 132),
        GpuProduct("A100", "NVIDIA-A100-SXM4-80GB", 81920, 108),
        GpuProduct("A100-40GB", "NVIDIA-A100-SXM4-40GB", 40960, 108),
        GpuProduct("L40S", "NVIDIA-L40S", 46068, 142),
        GpuProduct("L4", "NVIDIA-L4", 23034, 58),
        GpuProduct("A10", "NVIDIA-A10", 23028, 72),
        GpuProduct("T4", "Tesla-T4", 15360, 40),
        GpuProduct("B200", "NVIDIA-B200", 183359, 148),
    )
}


class GpuSpecError(ValueError):
    """A declared GPU spec such as ``8xH100`` could not be understood."""


def parse_gpu_spec(spec: str) -> tuple[int, GpuProduct]:
    """Parse ``COUNTxPRODUCT`` (``8xH100``, ``1xL40S``) into a count and a product."""
    count_text, sep, name = spec.strip().partition("x")
    if not sep or not count_text.isdigit():
        raise GpuSpecError(f"--gpus {spec!r}: expected COUNTxPRODUCT, e.g. 8xH100")
    count = int(count_text)
    if count < 1:
        raise GpuSpecError(f"--gpus {spec!r}: the count must be at least 1")
    product = PRODUCTS.get(name.lower())
    if product is None:
        known = ", ".join(sorted(p.key for p in PRODUCTS.values()))
        raise GpuSpecError(f"--gpus {spec!r}: unknown product {name!r} (known: {known})")
    return count, product


#: Known products by the name the ``nvidia.com/gpu.product`` label carries.
_BY_LABEL: dict[str, GpuProduct] = {p.product.lower(): p for p in PRODUCTS.values()}


def gpu_type_name(name: str) -> str:
    """The one name of a GPU type: a known product's short key (``H100``) whether given
    as that key (any case) or as its ``nvidia.com/gpu.product`` label value
    (``NVIDIA-H100-80GB-HBM3``); any other product's label value as it is."""
    product = PRODUCTS.get(name.lower()) or _BY_LABEL.get(name.lower())
    return product.key if product is not None else name
