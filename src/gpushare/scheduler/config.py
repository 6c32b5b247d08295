"""Scheduler configuration (the scenario format's ``config`` block)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpushare.model.pod import Pod

#: The node label naming a node's pool (KAI's); a pod of a pool selects it in its
#: ``nodeSelector``, which the controllers derive from the pod's label of the same name.
NODE_POOL_LABEL = "kai.scheduler/node-pool"

DEFAULT_ACTIONS: tuple[str, ...] = (
    "allocate",
    "consolidation",
    "reclaim",
    "preempt",
    "stalegangeviction",
)


@dataclass(frozen=True, slots=True)
class Config:
    actions: tuple[str, ...] = DEFAULT_ACTIONS
    gpu_placement: str = "binpack"  # binpack | spread | fgd | fragmentation
    cpu_placement: str = "binpack"
    staleness_grace_seconds: float = 60.0
    max_consolidation_preemptees: int = 16  # -1: no limit
    allow_consolidating_reclaim: bool = True
    k_value: float = 1.0
    compat: str | None = None  # "kai": reproduce KAI Scheduler exactly
    extra: dict[str, object] = field(default_factory=dict)  # keys other parts add
    #: Per node pool ``(pool, gpu placement, cpu placement)``: a pod whose node selector
    #: names the pool (``NODE_POOL_LABEL``) is placed by that pool's rules.
    pool_placement: tuple[tuple[str, str, str], ...] = ()
    #: Seconds a job waits unplaced before nodes are reserved for it (``reservation:
    #: {afterSeconds}``); None: no reservations unless a queue sets its own threshold.
    reservation_after: float | None = None
    #: Per-job aging ``(step seconds, max boost)``: inside a queue a pending job orders as
    #: if its priority were higher by one point per whole step it has waited, at most
    #: ``max boost`` points (``jobAging``); None: off. Not allowed under ``compat: kai``.
    job_aging: tuple[float, int] | None = None

    def placement_for(self, pod: Pod) -> tuple[str, str]:
        """The (GPU, CPU) placement strategies that place this pod."""
        if self.pool_placement:
            pool = pod.node_selector.get(NODE_POOL_LABEL)
            if pool is not None:
                for name, gpu, cpu in self.pool_placement:
                    if name == pool:
                        return gpu, cpu
        return self.gpu_placement, self.cpu_placement

    def placements(self) -> tuple[tuple[str, str], ...]:
        """Every (GPU, CPU) strategy pair in use: the cluster's, then the pools'."""
        pairs = [(self.gpu_placement, self.cpu_placement)]
        pairs += [(gpu, cpu) for _, gpu, cpu in self.pool_placement]
        return tuple(dict.fromkeys(pairs))

    @property
    def kai(self) -> bool:
        return self.compat == "kai"

    @property
    def fairshare_mode(self) -> str:
        return "kai" if self.kai else "exact"
