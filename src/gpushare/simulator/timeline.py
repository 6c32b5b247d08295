"""The timeline protocol: pods arrive at their creation time and leave at their deletion
time; a scheduling cycle of the real core (every configured action, queues and fair
shares included) runs at each moment something happens. Queues come from a mapping of the
trace's pods (``--queue-by qos``: one queue per QoS class, equal weights; ``none``: one
queue). Reported: GPU allocation over time, per-queue waits (creation to first bind), pods
never placed, evictions, and fairness: each queue's running GPUs against the fair share
the core computed in each cycle, integrated over time, and Jain's index over queues.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpushare.model.pod import PodStatus
from gpushare.model.quantities import GPU, MILLI
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
    unplaced: dict[str, int] = field(default_factory=dict)  # never ran before leaving / the end
    evicted: dict[str, int] = field(default_factory=dict)  # evictions (a pod may run again)
    fairness: dict[str, QueueFairness] = field(default_factory=dict)  # leaf queue -> figures

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
                      "p95": _pct(w, 95), "unplaced": self.unplaced.get(q, 0),
                      "evicted": self.evicted.get(q, 0)}
        return out

    def fair_shares(self) -> dict[str, dict[str, float]]:
        """Per queue, time-weighted over the trace: GPUs allocated, the fair share the core
        computed, the deficit ``max(0, fair share − allocated)``, the share of the time the
        queue was short of its fair share by more than ``SHORT_GPUS``, and
        allocated / fair share."""
        span = self.points[-1][0] - self.points[0][0] if len(self.points) > 1 else 0.0
        return {q: f.report(span) for q, f in sorted(self.fairness.items())}

    def jain_index(self) -> float:
        """Jain's fairness index over the queues' allocated / fair share (time-weighted
        means; queues with no fair share left out): 1 when every queue got the same share
        of its fair share, down to 1/n."""
        ratios = [f["ratio"] for f in self.fair_shares().values() if f["fairShare"] > 0]
        if not ratios or not any(ratios):
            return 1.0
        return sum(ratios) ** 2 / (len(ratios) * sum(r * r for r in ratios))

    def allocation_series(self) -> list[tuple[float, float]]:
        return self.points

    def summary(self) -> dict:
        return {"kind": "summary", "mode": "timeline", "policy": self.policy,
                "gpus": self.capacity / MILLI, "pods": self.total, "placed": self.placed,
                "meanAllocation": round(self.mean_allocation, 4), "queues": self.waits(),
                "fairShare": self.fair_shares(), "jainIndex": round(self.jain_index(), 4)}


#: A queue counts as short of its fair share when more than this many GPUs below it.
SHORT_GPUS = 0.01


@dataclass(slots=True)
class QueueFairness:
    """A queue's GPUs allocated and fair share over time, integrated between events."""

    allocated: float = 0.0  # GPU-seconds
    fair_share: float = 0.0
    deficit: float = 0.0
    short: float = 0.0  # seconds short of the fair share
    last: tuple[float, float] = (0.0, 0.0)  # (allocated, fair share) since the last event

    def advance(self, seconds: float) -> None:
        allocated, fair = self.last
        self.allocated += seconds * allocated
        self.fair_share += seconds * fair
        gap = max(0.0, fair - allocated)
        self.deficit += seconds * gap
        if gap > SHORT_GPUS:
            self.short += seconds

    def report(self, span: float) -> dict[str, float]:
        if span <= 0:
            allocated, fair = self.last
            gap = max(0.0, fair - allocated)
            means = (allocated, fair, gap, 1.0 if gap > SHORT_GPUS else 0.0)
        else:
            means = (self.allocated / span, self.fair_share / span, self.deficit / span,
                     self.short / span)
        ratio = means[0] / means[1] if means[1] > 0 else 0.0
        return {"allocatedGpus": round(means[0], 4), "fairShare": round(means[1], 4),
                "deficitGpus": round(means[2], 4), "shortOfFairShare": round(means[3], 4),
                "ratio": round(ratio, 4)}


def _gpus(figures: dict[str, float]) -> float:
    return float(figures.get(GPU, 0.0))


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
    if policy == "random":
        raise ValueError("policy: random is a fill-mode baseline, not a scheduler rule")
    replay = _Replay(nodes, pods, policy, queue_by)
    events = _events(pods)
    j = 0
    last_time: float | None = None
    while j < len(events):
        now = events[j][0]
        if last_time is not None:
            for f in replay.result.fairness.values():
                f.advance(now - last_time)
        last_time = now
        while j < len(events) and events[j][0] == now:
            _, kind, i = events[j]
            if kind == 1:
                replay.arrive(pods[i], now)
            else:
                replay.leave(pods[i])
            j += 1
        replay.cycle(now)
    return replay.finish()


def _events(pods: list[TracePod]) -> list[tuple[float, int, int]]:
    """(time, 0 leave / 1 arrive, pod index), in time order, leaves first."""
    events: list[tuple[float, int, int]] = []
    for i, p in enumerate(pods):
        events.append((p.created, 1, i))
        if p.deleted is not None:
            events.append((p.deleted, 0, i))
    events.sort()
    return events


class _Replay:
    """A trace replayed through the scheduler core: the cluster's state and what the
    result counts, one event and one cycle at a time."""

    def __init__(self, nodes: list[TraceNode], pods: list[TracePod], policy: str,
                 queue_by: str) -> None:
        capacity = sum(n.gpus for n in nodes) * MILLI
        self.state = ClusterState()
        for n in nodes:
            self.state.upsert_node(n.to_node())
        self.state.upsert_queue(Queue(ROOT))
        queues = sorted({queue_of(p, queue_by) for p in pods})
        for q in queues:
            self.state.upsert_queue(Queue(q, parent=ROOT))
        self.config = Config(gpu_placement=policy)
        set_task_mix(self.state, TaskMix.of(p.shape() for p in pods))
        self.queue_by = queue_by
        self.capacity = capacity
        self.result = TimelineResult(policy, capacity, total=len(pods))
        self.result.fairness = {q: QueueFairness() for q in queues}
        self.allocated = 0
        self.running = dict.fromkeys(queues, 0)  # milli-GPUs of each queue's running pods
        self.created_at: dict[str, float] = {}
        self.by_key: dict[str, TracePod] = {}
        self.started: set[str] = set()  # pods that have been bound once

    def arrive(self, tp: TracePod, now: float) -> None:
        key = f"trace/{tp.name}"
        self.state.upsert_job(tp.to_job(queue_of(tp, self.queue_by), created_at=now))
        self.state.upsert_pod(tp.to_pod())
        self.created_at[key] = now
        self.by_key[key] = tp

    def leave(self, tp: TracePod) -> None:
        key = f"trace/{tp.name}"
        pod = self.state.pods.get(key)
        if pod is None:
            return
        q = queue_of(tp, self.queue_by)
        if pod.status is PodStatus.RUNNING:
            self.allocated -= tp.gpu_total
            self.running[q] -= tp.gpu_total
        elif key not in self.started:
            self.result.unplaced[q] = self.result.unplaced.get(q, 0) + 1
        self.state.remove_pod(key)
        self.state.remove_job(key)

    def cycle(self, now: float) -> None:
        """One scheduling cycle at ``now``, its decisions applied as the cluster would."""
        cycle = run_cycle(self.state, self.config, now)
        for b in cycle.binds:
            self._bind(b.pod, now)
        for e in cycle.evictions:
            self._evict(e.pod)
        for pipelined in cycle.pipelines:
            waiting = self.state.pods.get(pipelined.pod)
            if waiting is not None and waiting.status is PodStatus.PIPELINED:
                self.state.set_pod(waiting, PodStatus.PENDING)
        self.result.points.append((now, 100 * self.allocated / self.capacity))
        for q, f in self.result.fairness.items():
            report = cycle.queues.get(q)
            fair = _gpus(report.fair_share) if report is not None else 0.0
            f.last = (self.running[q] / MILLI, fair)

    def _bind(self, key: str, now: float) -> None:
        pod = self.state.pods[key]
        self.state.set_pod(pod, PodStatus.RUNNING, pod.node, pod.gpu_indices, pod.portion)
        tp = self.by_key[key]
        q = queue_of(tp, self.queue_by)
        self.allocated += tp.gpu_total
        self.running[q] += tp.gpu_total
        if key not in self.started:
            self.started.add(key)
            self.result.placed += 1
            self.result.wait.setdefault(q, []).append(now - self.created_at[key])

    def _evict(self, key: str) -> None:
        victim = self.state.pods.get(key)
        if victim is None:
            return
        tp = self.by_key[key]
        q = queue_of(tp, self.queue_by)
        if victim.status is PodStatus.RELEASING:
            self.allocated -= tp.gpu_total
            self.running[q] -= tp.gpu_total
            self.result.evicted[q] = self.result.evicted.get(q, 0) + 1
        self.state.set_pod(victim, PodStatus.PENDING)

    def finish(self) -> TimelineResult:
        """The result, counting the pods never placed that are still waiting."""
        for key, pod in self.state.pods.items():
            if pod.status is PodStatus.PENDING and key not in self.started:
                q = queue_of(self.by_key[key], self.queue_by)
                self.result.unplaced[q] = self.result.unplaced.get(q, 0) + 1
        return self.result
