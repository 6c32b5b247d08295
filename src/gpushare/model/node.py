"""Nodes and their GPUs."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Node:
    name: str
    gpus: int = 0
    gpu_memory_mib: int = 81920  # memory of each GPU
    cpu_millis: int = 64000
    memory_bytes: int = 262144 * 1024 * 1024
    max_pods: int = 110
    labels: dict[str, str] = field(default_factory=dict)
    ready: bool = True
