"""Which victims could help a step at all (gpushare's own rule; off under ``compat: kai``).

A pod is worth evicting only if it frees something the step lacks where it runs. On a
node that already has room for the whole step, or that none of the step's pods may use,
no victim helps; on a node short of GPUs only pods holding GPUs there help; and so on
for CPU, memory and pod slots. KAI offers every running pod of an eligible job, so on a
GPU-saturated cluster with CPU to spare its search wades through CPU-only pods that it
then evicts and moves for nothing. Dropping them changes which scenarios are tried, never
what room a tried scenario makes for the step.

The test is per node and conservative: a node lacks a resource when the step's total
demand for it exceeds what the node has free (counting what Releasing pods will free), so
a victim that might help some pod of the step is kept.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpushare.model import ACTIVE_ALLOCATED, Job, Pod
from gpushare.model.quantities import MILLI
from gpushare.scheduler.state import ClusterState, NodeUsage

_GPU, _CPU, _MEM, _SLOT = 1, 2, 4, 8


class StepNeeds:
    """The step's total demand, and per node (computed on first use) what it lacks."""

    def __init__(
        self, state: ClusterState, step: Sequence[Pod],
        may_take: Callable[[Job], bool] | None = None,
        gpu_holders: Callable[[str], dict[int, list[tuple[str, int]]]] | None = None,
    ) -> None:
        self._holders = gpu_holders
        self._state = state
        self._step = step
        self._whole = sum(p.gpu.whole for p in step)
        self._shared = [p for p in step if not p.gpu.whole and p.gpu.is_shared]
        # The smallest share the step asks for, on the roomiest GPUs (a lower bound).
        big_memory = state.gpu_memory_range()[1] or 0
        self._least_share = min(
            (min(p.gpu.portion_on(big_memory), MILLI) for p in self._shared), default=0
        )
        self._may_take = may_take
        self._gpu_room: dict[tuple[str, int], int] = {}
        self._cpu = sum(p.cpu_millis for p in step)
        self._mem = sum(p.memory_bytes for p in step)
        self._slots = len(step)
        self._lacks: dict[str, int] = {}

    def lacks(self, node: str) -> int:
        """A bit set of what ``node`` is short of for the step (0: nothing, or unusable)."""
        found = self._lacks.get(node)
        if found is None:
            usage = self._state.usage.get(node)
            found = self._lacks[node] = 0 if usage is None else self._compute(usage)
        return found

    def _compute(self, usage: NodeUsage) -> int:
        node = usage.node
        if not node.ready:
            return 0
        labels = node.labels
        usable = [
            p for p in self._step if p.matches_labels(labels)
        ]
        if not usable:
            return 0
        lacks = 0
        if self._slots > usage.pods_free_future():
            lacks |= _SLOT
        if self._cpu > usage.cpu_free_future():
            lacks |= _CPU
        if self._mem > usage.mem_free_future():
            lacks |= _MEM
        free = [usage.gpu_free_future(i) for i in range(node.gpus)]
        if self._whole and self._whole > sum(1 for f in free if f == MILLI):
            lacks |= _GPU
        if self._shared and not lacks & _GPU:
            # Shares need room on as many GPUs as they ask for; the fullest-first packing
            # of the real placement is not modelled: any shortfall marks the node.
            room = sorted(free, reverse=True)
            for pod in self._shared:
                portion = pod.gpu.portion_on(node.gpu_memory_mib)
                fitting = [i for i, f in enumerate(room) if f >= portion]
                if len(fitting) < pod.gpu.devices:
                    lacks |= _GPU
                    break
                for i in fitting[: pod.gpu.devices]:
                    room[i] -= portion
        return lacks

    def helps(self, pod: Pod) -> bool:
        """Whether evicting ``pod`` frees something its node lacks for the step."""
        if pod.node is None or pod.status not in ACTIVE_ALLOCATED:
            return False
        lacks = self.lacks(pod.node)
        if not lacks:
            return False
        if lacks & _SLOT:
            return True
        held = pod.held()
        return bool(
            (lacks & _GPU and held.gpu > 0 and self._gpus_can_serve(pod))
            or (lacks & _CPU and held.cpu > 0)
            or (lacks & _MEM and held.mem > 0)
        )

    def _gpus_can_serve(self, pod: Pod) -> bool:
        """Whether one of the shared GPUs the pod holds could ever give the step what it
        asks of a GPU: entirely free for a whole-GPU pod (every pod on it may be taken),
        or room for its smallest share. A GPU that a pod outside the candidates keeps
        can never be whole again, so its other pods are no use to a whole-GPU step."""
        if self._may_take is None or self._holders is None:
            return True  # no view of who else holds the GPU: assume it could serve
        if not pod.gpu.is_shared or pod.node is None:
            return True
        return any(self._room(pod.node, i) >= self._needed_room() for i in pod.gpu_indices)

    def _needed_room(self) -> int:
        return MILLI if self._whole else self._least_share

    def _room(self, node: str, index: int) -> int:
        """What GPU ``index`` of ``node`` would have free with every candidate on it gone."""
        key = (node, index)
        room = self._gpu_room.get(key)
        if room is None:
            room = self._state.usage[node].gpu_free_future(index)
            jobs = self._state.jobs
            may_take = self._may_take
            held = self._holders(node).get(index, ()) if self._holders is not None else ()
            for job_key, share in held:
                job = jobs.get(job_key)
                if job is not None and may_take is not None and may_take(job):
                    room += share
            self._gpu_room[key] = room
        return room

