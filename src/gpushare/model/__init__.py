"""Pure data of gpushare's scheduler: quantities, queues, jobs, pods, nodes."""

from gpushare.model.job import Job, SubGroup
from gpushare.model.node import Node
from gpushare.model.pod import ACTIVE_ALLOCATED, FINISHED, ON_NODE, GpuRequest, Pod, PodStatus
from gpushare.model.quantities import CPU, GPU, MEMORY, RESOURCES, Res
from gpushare.model.queue import UNLIMITED, Queue, ResourceSpec

__all__ = [
    "ACTIVE_ALLOCATED",
    "CPU",
    "FINISHED",
    "GPU",
    "MEMORY",
    "ON_NODE",
    "RESOURCES",
    "UNLIMITED",
    "GpuRequest",
    "Job",
    "Node",
    "Pod",
    "PodStatus",
    "Queue",
    "Res",
    "ResourceSpec",
    "SubGroup",
]
