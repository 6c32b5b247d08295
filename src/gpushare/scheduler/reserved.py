"""Nodes reserved for waiting gangs, as placement reads them during a cycle.

``state.reservations`` (job key -> :class:`~gpushare.model.reservation.Reservation`) is
the cycle's input; this module turns it into what a placement asks: may this pod go on
this node? Only the reserving job's pods may, and a backfill job: one that declares a
maximum runtime (``Job.expected_runtime``) ending before the reserved nodes are due,
that is before the work already on them is expected to end. Where that work declares no
runtime the nodes' due time is unknown and nothing backfills there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from gpushare.model.pod import Pod, PodStatus
from gpushare.scheduler.state import ClusterState


def pod_ends_at(state: ClusterState, pod: Pod, now: float) -> float | None:
    """When the pod is expected to end (None: its job declares no runtime)."""
    if pod.status is PodStatus.RELEASING:
        return now
    job = state.jobs.get(pod.job)
    if job is None or job.expected_runtime is None:
        return None
    start = pod.started_at if pod.started_at > float("-inf") else now
    return max(now, start + job.expected_runtime)


def nodes_free_at(state: ClusterState, nodes: Iterable[str], now: float,
                  owner: str) -> float | None:
    """When the work on the nodes (the owner's own pods aside) is expected to be over;
    ``now`` for idle nodes, None when some of it declares no runtime."""
    due = now
    for name in nodes:
        for pod in state.pods_on(name):
            if pod.job == owner:
                continue
            end = pod_ends_at(state, pod, now)
            if end is None:
                return None
            due = max(due, end)
    return due


@dataclass(frozen=True, slots=True)
class Hold:
    job: str  # the reserving job's key
    due: float | None  # when its nodes are expected to be free; None: unknown


@dataclass(slots=True)
class ReservedNodes:
    now: float = 0.0
    by_node: dict[str, Hold] = field(default_factory=dict)

    @classmethod
    def of(cls, state: ClusterState, now: float) -> ReservedNodes:
        out = cls(now)
        for key in sorted(state.reservations):
            nodes = state.reservations[key].nodes
            hold = Hold(key, nodes_free_at(state, nodes, now, key))
            for name in nodes:
                out.by_node.setdefault(name, hold)
        return out

    def allows(self, state: ClusterState, pod: Pod, node: str) -> bool:
        """Whether the reservations let the pod go on the node."""
        hold = self.by_node.get(node)
        if hold is None or hold.job == pod.job or pod.node == node:
            return True
        job = state.jobs.get(pod.job)
        if job is None or job.expected_runtime is None or hold.due is None:
            return False
        return self.now + job.expected_runtime <= hold.due


def release_settled(state: ClusterState, formed: Callable[[str], bool]) -> None:
    """Drop the reservations of jobs that are gone, have nothing left to place, or whose
    gang is formed (``formed(job key)``: what is still pending are its spare pods)."""
    for key in sorted(state.reservations):
        if key not in state.jobs or not state.has_pending_pods(key) or formed(key):
            del state.reservations[key]
