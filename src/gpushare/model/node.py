"""Nodes and their GPUs."""

from __future__ import annotations

from dataclasses import dataclass, field

#: The node label that names a node's blocking taints (``key=value:effect`` joined by
#: commas; empty without any): taints reach the core as this label, and a pod's affinity
#: allows the taint sets it tolerates. Not a valid label key: no real label clashes.
TAINTS_LABEL = "(blocking taints)"


@dataclass(slots=True)
class Node:
    name: str
    gpus: int = 0
    gpu_memory_mib: int = 81920  # memory of each GPU
    cpu_millis: int = 64000
    memory_bytes: int = 262144 * 1024 * 1024
    max_pods: int = 110
    labels: dict[str, str] = field(default_factory=dict)
    ready: bool = True  # False also while cordoned: nothing new is placed there
    cordoned: bool = False  # not ready because it was cordoned (spec.unschedulable)
