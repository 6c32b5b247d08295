"""Small builders for scheduler tests."""

from __future__ import annotations

from fractions import Fraction

from gpushare.model import GpuRequest, Job, Node, Pod, PodStatus, Queue, ResourceSpec
from gpushare.model.quantities import RESOURCES
from gpushare.scheduler.state import ClusterState

UNL = Fraction(-1)


def queue(name: str, parent: str | None = None, gpu_quota=0, gpu_limit=-1, weight=1,
          priority: int = 100) -> Queue:
    res = {r: ResourceSpec(UNL, UNL, Fraction(1)) for r in RESOURCES}
    res["gpu"] = ResourceSpec(Fraction(str(gpu_quota)), Fraction(str(gpu_limit)),
                              Fraction(str(weight)))
    return Queue(name, parent=parent, priority=priority, resources=res)


def cluster(nodes: int = 1, gpus: int = 2, gpu_memory_mib: int = 100) -> ClusterState:
    state = ClusterState()
    for i in range(nodes):
        state.upsert_node(Node(f"node{i}", gpus=gpus, gpu_memory_mib=gpu_memory_mib))
    return state


def add_job(state: ClusterState, name: str, queue_name: str, pods: int = 1, *,
            whole: int = 0, portion: int = 0, memory_mib: int = 0, min_member: int | None = None,
            priority: int = 50, preemptible: bool | None = None, created_at: float = 0.0,
            status: PodStatus = PodStatus.PENDING, node: str | None = None) -> Job:
    job = Job(name, "default", queue_name, priority=priority,
              preemptible=priority < 100 if preemptible is None else preemptible,
              min_member=pods if min_member is None else min_member, created_at=created_at)
    state.upsert_job(job)
    for i in range(pods):
        pod = Pod(f"{name}-{i}", "default", job.key, i,
                  gpu=GpuRequest(whole=whole, portion=portion, memory_mib=memory_mib),
                  cpu_millis=100, memory_bytes=1024, status=status, node=node)
        if node is not None and whole:
            free, _ = state.usage[node].whole_gpus_free()
            pod.gpu_indices, pod.portion = tuple(free[:whole]), 1000
        state.upsert_pod(pod)
    return job
