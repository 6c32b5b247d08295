"""A small interface over NVML, so the watchdog and usage logic can be tested without a GPU.

`PynvmlBackend` is the real one (nvidia-ml-py). Tests use a fake named as such
(`tests/agent/fake_nvml.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from gpushare.agent.node.inventory import GpuDevice, GpuInventory, label_product, sm_count_for


@dataclass(frozen=True, slots=True)
class GpuProcess:
    pid: int
    used_bytes: int  # 0 when NVML cannot say (it reports "not available" under some setups)


@dataclass(frozen=True, slots=True)
class ProcessUtilization:
    pid: int
    sm_percent: int
    timestamp_us: int


class NvmlBackend(Protocol):
    def devices(self) -> list[GpuDevice]: ...

    def driver_version(self) -> str: ...

    def compute_processes(self, index: int) -> list[GpuProcess]: ...

    def process_utilization(self, index: int, since_us: int) -> list[ProcessUtilization]: ...

    def used_memory_bytes(self, index: int) -> int: ...


class NvmlUnavailable(RuntimeError):
    """NVML could not be loaded or found no GPU."""


class PynvmlBackend:
    """The real NVML through nvidia-ml-py (import name `pynvml`)."""

    def __init__(self) -> None:
        try:
            import pynvml
        except ImportError as exc:  # pragma: no cover - the dependency is declared
            raise NvmlUnavailable(f"nvidia-ml-py is not installed: {exc}") from exc
        self._nvml = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NvmlUnavailable(f"NVML did not initialise: {exc}") from exc
        count = pynvml.nvmlDeviceGetCount()
        if count == 0:
            raise NvmlUnavailable("NVML found no GPU")
        self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]

    def close(self) -> None:
        self._nvml.nvmlShutdown()

    def devices(self) -> list[GpuDevice]:
        nv = self._nvml
        found = []
        for index, handle in enumerate(self._handles):
            name = _text(nv.nvmlDeviceGetName(handle))
            memory = nv.nvmlDeviceGetMemoryInfo(handle)
            found.append(
                GpuDevice(
                    index=index,
                    uuid=_text(nv.nvmlDeviceGetUUID(handle)),
                    product=label_product(name),
                    memory_mib=int(memory.total) // (1024 * 1024),
                    sm_count=sm_count_for(name),
                )
            )
        return found

    def driver_version(self) -> str:
        return _text(self._nvml.nvmlSystemGetDriverVersion())

    def compute_processes(self, index: int) -> list[GpuProcess]:
        nv = self._nvml
        handle = self._handles[index]
        seen: dict[int, int] = {}
        calls = [nv.nvmlDeviceGetComputeRunningProcesses]
        # Under MPS the clients are listed by the MPS variant on some drivers.
        mps_call = getattr(nv, "nvmlDeviceGetMPSComputeRunningProcesses", None)
        if mps_call is not None:
            calls.append(mps_call)
        for call in calls:
            try:
                infos = call(handle)
            except nv.NVMLError:
                continue
            for info in infos:
                used = info.usedGpuMemory
                used_bytes = int(used) if isinstance(used, int) and used >= 0 else 0
                # NVML reports "not available" as a huge sentinel value on some setups.
                if used_bytes >= 1 << 60:
                    used_bytes = 0
                seen[int(info.pid)] = max(seen.get(int(info.pid), 0), used_bytes)
        return [GpuProcess(pid=pid, used_bytes=used) for pid, used in sorted(seen.items())]

    def process_utilization(self, index: int, since_us: int) -> list[ProcessUtilization]:
        nv = self._nvml
        try:
            samples = nv.nvmlDeviceGetProcessUtilization(self._handles[index], since_us)
        except nv.NVMLError:
            # NOT_FOUND means no process ran a kernel since the timestamp
            return []
        return [
            ProcessUtilization(
                pid=int(s.pid), sm_percent=int(s.smUtil), timestamp_us=int(s.timeStamp)
            )
            for s in samples
        ]

    def used_memory_bytes(self, index: int) -> int:
        return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handles[index]).used)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def probe_inventory(backend: NvmlBackend) -> GpuInventory:
    return GpuInventory(devices=tuple(backend.devices()), declared=False)
