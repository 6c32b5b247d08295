"""The timeline protocol: pods arrive at their creation time and leave at their deletion
time; a scheduling cycle of the real core (every configured action, queues and fair
shares included) runs at each moment something happens. Queues come from a mapping of the
trace's pods (``--queue-by qos``: one queue per QoS class, equal weights; ``none``: one
queue). Reported: GPU allocation over time, per-queue waits (creation to bind) and pods
never placed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpushare.model.pod import PodStatus
from gpushare.model.quantities import MILLI
from gpushare.model.queue import Queue
from gpushare.scheduler.config import Config
from gpushare.scheduler.cycle import run_cycle
from gpushare.scheduler.frag_placement import set_task_mix
from gpushare.scheduler.fragmentation import TaskMix
from gpushare.scheduler.state import ClusterState
from gpushare.simulator.traces import TraceNode, TracePod

QUEUE_BY = ("qos", "none")
ROOT = "trace"


@dataclass(slots=True)
class TimelineResult:
    policy: str
    capacity: int
    total: int = 0
    placed: int = 0
    points: list[tuple[float, float]] = field(default_factory=list)  # (time, allocated %)
    wait: dict[str, list[float]] = field(default_factory=dict)  # queue -> waits (s)
    unplaced: dict[str, int] = field(default_factory=dict)

    @property
    def mean_allocation(self) -> float:
        """Time-weighted mean of allocated % between the first and last event."""
        pts = self.points
        if len(pts) < 2:
            return pts[0][1] if pts else 0.0
        area = sum((pts[i + 1][0] - pts[i][0]) * pts[i][1] for i in range(len(pts) - 1))
        span = pts[-1][0] - pts[0][0]
        return area / span if span else pts[-1][1]

    def waits(self) -> dict[str, dict[str, float]]:
        out = {}
        for q in sorted(set(self.wait) | set(self.unplaced)):
            w = sorted(self.wait.get(q, []))
            out[q] = {"pods": len(w) + self.unplaced.get(q, 0), "p50": _pct(w, 50),
                      "p95": _pct(w, 95), "unplaced": self.unplaced.get(q, 0)}
        return out

    def allocation_series(self) -> list[tuple[float, float]]:
        return self.points

    def summary(self) -> dict:
        return {"kind": "summary", "mode": "timeline", "policy": self.policy,
                "gpus": self.capacity / MILLI, "pods": self.total, "placed": self.placed,
                "meanAllocation": round(self.mean_allocation, 4), "queues": self.waits()}


def _pct(values: list[float], p: int) -> float:
    if not values:
        return 0.0
    return values[min(len(values) - 1, (len(values) * p) // 100)]


def queue_of(pod: TracePod, queue_by: str) -> str:
    if pod.queue:
        return pod.queue
    if queue_by == "qos" and pod.qos:
        return pod.qos.lower()
    return "default"


def run_timeline(
    nodes: list[TraceNode], pods: list[TracePod], policy: str, queue_by: str = "qos",
) -> TimelineResult:
    capacity = sum(n.gpus for n in nodes) * MILLI
    state = ClusterState()
    for n in nodes:
        state.upsert_node(n.to_node())
    state.upsert_queue(Queue(ROOT))
    queues = sorted({queue_of(p, queue_by) for p in pods})
    for q in queues:
        state.upsert_queue(Queue(q, parent=ROOT))
    if policy == "random":
        raise ValueError("policy: random is a fill-mode baseline, not a scheduler rule")
    config = Config(gpu_placement=policy)
    set_task_mix(state, TaskMix.of(p.shape() for p in pods))
    result = TimelineResult(policy, capacity, total=len(pods))
    events: list[tuple[float, int, int]] = []  # (time, 0 leave / 1 arrive, pod index)
    for i, p in enumerate(pods):
        events.append((p.created, 1, i))
        if p.deleted is not None:
            events.append((p.deleted, 0, i))
    events.sort()
    allocated = 0
    created_at: dict[str, float] = {}
    by_key = {}
    j = 0
    while j < len(events):
        now = events[j][0]
        while j < len(events) and events[j][0] == now:
            _, kind, i = events[j]
            tp = pods[i]
            key = f"trace/{tp.name}"
            if kind == 1:
                pod = tp.to_pod()
                state.upsert_job(tp.to_job(queue_of(tp, queue_by), created_at=now))
                state.upsert_pod(pod)
                created_at[key] = now
                by_key[key] = tp
            elif key in state.pods:
                pod = state.pods[key]
                if pod.status is PodStatus.RUNNING:
                    allocated -= tp.gpu_total
                else:
                    q = queue_of(tp, queue_by)
                    result.unplaced[q] = result.unplaced.get(q, 0) + 1
                state.remove_pod(key)
                state.remove_job(key)
            j += 1
        cycle = run_cycle(state, config, now)
        for b in cycle.binds:
            pod = state.pods[b.pod]
            state.set_pod(pod, PodStatus.RUNNING, pod.node, pod.gpu_indices, pod.portion)
            tp = by_key[b.pod]
            allocated += tp.gpu_total
            result.placed += 1
            q = queue_of(tp, queue_by)
            result.wait.setdefault(q, []).append(now - created_at[b.pod])
        for e in cycle.evictions:
            victim = state.pods.get(e.pod)
            if victim is not None:
                if victim.status is PodStatus.RELEASING:
                    allocated -= by_key[e.pod].gpu_total
                state.set_pod(victim, PodStatus.PENDING)
        for pipelined in cycle.pipelines:
            waiting = state.pods.get(pipelined.pod)
            if waiting is not None and waiting.status is PodStatus.PIPELINED:
                state.set_pod(waiting, PodStatus.PENDING)
        result.points.append((now, 100 * allocated / capacity))
    for key, pod in state.pods.items():
        if pod.status is PodStatus.PENDING:
            q = queue_of(by_key[key], queue_by)
            result.unplaced[q] = result.unplaced.get(q, 0) + 1
    return result
