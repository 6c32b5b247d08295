"""A FAKE NVML for tests on machines without GPUs: it reports whatever the test sets."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpushare.agent.gpu.nvml import GpuProcess, ProcessUtilization
from gpushare.agent.node.inventory import GpuDevice, declared_gpus


@dataclass
class FakeNvml:
    """Set `processes[index]` / `utilization[index]`; the watchdog reads them as NVML's."""

    device_list: list[GpuDevice]
    processes: dict[int, list[GpuProcess]] = field(default_factory=dict)
    utilization: dict[int, list[ProcessUtilization]] = field(default_factory=dict)

    @classmethod
    def with_gpus(cls, spec: str = "1xH200", node: str = "fake-nvml-node") -> FakeNvml:
        return cls(list(declared_gpus(node, spec).devices))

    def devices(self) -> list[GpuDevice]:
        return list(self.device_list)

    def driver_version(self) -> str:
        return "fake-nvml"

    def compute_processes(self, index: int) -> list[GpuProcess]:
        return list(self.processes.get(index, []))

    def process_utilization(self, index: int, since_us: int) -> list[ProcessUtilization]:
        return [u for u in self.utilization.get(index, []) if u.timestamp_us > since_us]

    def used_memory_bytes(self, index: int) -> int:
        return sum(p.used_bytes for p in self.processes.get(index, []))
