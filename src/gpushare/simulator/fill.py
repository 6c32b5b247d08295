"""The fill protocol of the FGD study (ATC'23): pods shuffled with a seed, the list re-sampled
until its GPU demand is ``demand`` times the cluster's GPU capacity, then placed one by one
with no departures; GPU allocation and fragmentation recorded after every pod.

Each pod goes through the real scheduler core: it is added to a ``ClusterState`` as a
one-pod job of the trace's single, unlimited queue and placed by the core's placement
(``place_pod`` in a statement, the call the ``allocate`` action makes for a one-pod step;
the queue checks and fair order have nothing to decide with one queue and one pending pod,
and a whole cycle per pod would cost a pass over every pod). What binds settles as
Running; a pod that finds no room leaves. ``random`` (a baseline, not a core rule) picks
uniformly among the nodes the core says fit.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from gpushare.model.pod import PodStatus
from gpushare.model.quantities import MILLI
from gpushare.model.queue import Queue
from gpushare.scheduler.config import Config
from gpushare.scheduler.cycle import open_session
from gpushare.scheduler.frag_placement import set_task_mix
from gpushare.scheduler.fragmentation import (
    FRAGMENTATION_POLICIES,
    GPU_PRODUCT_LABEL,
    FragmentationModel,
    TaskMix,
)
from gpushare.scheduler.placement import fit_on_node, place_pod
from gpushare.scheduler.state import ClusterState, NodeUsage
from gpushare.simulator.traces import Progress, TraceNode, TracePod

QUEUE = "trace"
CORE_POLICIES = ("binpack", "spread", *FRAGMENTATION_POLICIES)
POLICIES = (*CORE_POLICIES, "random")
#: The policy the project recommends for fractional GPUs.
RECOMMENDED = "fragmentation"


def tune(pods: list[TracePod], capacity: int, demand: float, rng: random.Random) -> list[TracePod]:
    """FGD's workload tuning: drop random pods while the GPU demand is above
    ``demand * capacity``, or add random copies while the next one still fits under it;
    then shuffle."""
    out = list(pods)
    target = demand * capacity
    total = sum(p.gpu_total for p in out)
    if pods and total > target:
        while out and total > target:
            total -= out.pop(rng.randrange(len(out))).gpu_total
    elif pods and total < target:
        i = 0
        while True:
            p = pods[rng.randrange(len(pods))]
            if total + p.gpu_total > target:
                break
            out.append(TracePod(f"{p.name}-tuned-{i}", p.cpu_millis, p.memory_mib, p.num_gpu,
                                p.gpu_milli, p.gpu_spec, p.qos, p.queue, p.created, p.deleted))
            total += p.gpu_total
            i += 1
    rng.shuffle(out)
    return out


@dataclass(slots=True)
class FillStep:
    pod: str
    node: str | None
    arrived: int  # milli-GPUs asked by all pods so far
    allocated: int  # milli-GPUs placed
    fragmentation: float  # milli-GPUs free but unusable by the task mix (FGD's figure)


@dataclass(slots=True)
class NodeTypeLeft:
    """What a node type (GPU model, GPUs per node, cores per node) has left at the end of a
    fill run: where the unallocated capacity is, and why it went unused."""

    nodes: int = 0
    capacity: int = 0  # milli-GPUs
    free: int = 0  # milli-GPUs free in all
    partial: int = 0  # of which on GPUs partly used (fragments of shared GPUs)
    stranded: int = 0  # of which on nodes with less than one core free
    cpu_free: int = 0  # millicores free

    def as_dict(self) -> dict[str, int]:
        return {"nodes": self.nodes, "capacity": self.capacity, "free": self.free,
                "partial": self.partial, "stranded": self.stranded, "cpuFree": self.cpu_free}


def leftover_by_node_type(state: ClusterState) -> dict[str, NodeTypeLeft]:
    """Per node type (``<model>x<GPUs>/<cores>c``), the GPU capacity left unallocated."""
    out: dict[str, NodeTypeLeft] = {}
    for usage in state.usage.values():
        node = usage.node
        if not node.gpus:
            continue
        kind = (f"{node.labels.get(GPU_PRODUCT_LABEL, '?')}x{node.gpus}/"
                f"{node.cpu_millis // 1000}c")
        left = out.setdefault(kind, NodeTypeLeft())
        frees = [usage.gpu_free_future(i) for i in range(node.gpus)]
        free = sum(frees)
        left.nodes += 1
        left.capacity += node.gpus * MILLI
        left.free += free
        left.partial += sum(f for f in frees if f < MILLI)
        cpu = usage.cpu_free_future()
        left.cpu_free += cpu
        if cpu < MILLI:
            left.stranded += free
    return dict(sorted(out.items(), key=lambda kv: (-kv[1].free, kv[0])))


@dataclass(slots=True)
class FillResult:
    policy: str
    seed: int
    capacity: int  # milli-GPUs
    steps: list[FillStep] = field(default_factory=list)
    seconds: float = 0.0
    left: dict[str, NodeTypeLeft] = field(default_factory=dict)  # at the end, by node type
    #: Pods that found no room: ``(GPUs, milli-GPU each, cores, GPU models)`` -> count.
    failed: dict[tuple[int, int, int, tuple[str, ...]], int] = field(default_factory=dict)

    @property
    def gpus(self) -> float:
        return self.capacity / MILLI

    def allocation(self, step_percent: int = 1, top: int = 130) -> dict[str, float]:
        """Allocated % of capacity when arrived demand first reaches each multiple of
        ``step_percent`` (and at the end for the last point), up to ``top``."""
        out: dict[str, float] = {}
        marks = list(range(step_percent, top + 1, step_percent))
        if top not in marks:
            marks.append(top)
        i = 0
        steps = self.steps
        for mark in marks:
            need = mark * self.capacity / 100
            while i < len(steps) and steps[i].arrived < need:
                i += 1
            at = steps[min(i, len(steps) - 1)] if steps else None
            out[str(mark)] = round(100 * at.allocated / self.capacity, 4) if at else 0.0
        return out

    def fragmentation(self, step_percent: int = 10, top: int = 130) -> dict[str, float]:
        out: dict[str, float] = {}
        i = 0
        steps = self.steps
        for mark in range(step_percent, top + 1, step_percent):
            need = mark * self.capacity / 100
            while i < len(steps) and steps[i].arrived < need:
                i += 1
            at = steps[min(i, len(steps) - 1)] if steps else None
            out[str(mark)] = round(100 * at.fragmentation / self.capacity, 4) if at else 0.0
        return out

    def summary(self) -> dict:
        return {"kind": "summary", "policy": self.policy, "seed": self.seed,
                "gpus": self.gpus, "allocation": self.allocation()}


def build_cluster(nodes: list[TraceNode]) -> ClusterState:
    state = ClusterState()
    for n in nodes:
        state.upsert_node(n.to_node())
    state.upsert_queue(Queue(QUEUE))
    return state


def capacity_of(nodes: list[TraceNode]) -> int:
    return sum(n.gpus for n in nodes) * MILLI


class FragmentationMeter:
    """The cluster's fragmentation (sum over nodes), kept up to date node by node."""

    def __init__(self, state: ClusterState, mix: TaskMix) -> None:
        self.state = state
        self.model = FragmentationModel(mix)
        self.per_node: dict[str, float] = {}
        self.total = 0.0
        for name, usage in state.usage.items():
            self.per_node[name] = value = self._of(usage)
            self.total += value

    def _of(self, u: NodeUsage) -> float:
        frees = tuple(u.gpu_free_future(i) for i in range(u.node.gpus))
        return self.model.of(u.node.labels.get(GPU_PRODUCT_LABEL), u.cpu_free_future(),
                             u.mem_free_future(), frees)

    def update(self, name: str) -> None:
        value = self._of(self.state.usage[name])
        self.total += value - self.per_node[name]
        self.per_node[name] = value


def run_fill(
    nodes: list[TraceNode], pods: list[TracePod], policy: str, seed: int,
    demand: float = 1.3, mix: TaskMix | None = None, progress: Progress | None = None,
) -> FillResult:
    """One fill run. ``mix``: the task-shape distribution the fragmentation figure and
    the fragmentation rules use (default: that of ``pods``, as FGD's typical pods);
    ``progress`` is told (pods placed or not, pods arriving) after each pod."""
    import time

    if policy not in POLICIES:
        raise ValueError(f"policy: expected one of {', '.join(POLICIES)}, got {policy!r}")
    capacity = capacity_of(nodes)
    rng = random.Random(seed)
    arriving = tune(pods, capacity, demand, rng)
    if mix is None:
        mix = TaskMix.of(p.shape() for p in pods)
    state = build_cluster(nodes)
    set_task_mix(state, mix)
    meter = FragmentationMeter(state, mix)
    config = Config(actions=("allocate",), gpu_placement=policy if policy in CORE_POLICIES
                    else "binpack")
    result = FillResult(policy, seed, capacity)
    arrived = allocated = 0
    pick = random.Random(seed + 1_000_003)
    session = open_session(state, config, 0.0)
    started = time.perf_counter()
    for i, tp in enumerate(arriving):
        pod = tp.to_pod()
        job = tp.to_job(QUEUE, created_at=float(i))
        state.upsert_job(job)
        state.upsert_pod(pod)
        arrived += tp.gpu_total
        stmt = state.statement()
        if policy == "random":
            node = _place_random(session, stmt, pod, pick)
        else:
            fit = place_pod(session, stmt, pod)
            node = fit.node if fit is not None and fit.now else None
        if node is None:
            stmt.discard()
        else:
            stmt.commit()
        if node is None:
            state.remove_pod(pod.key)
            state.remove_job(job.key)
            shape = (tp.num_gpu, tp.gpu_milli, tp.cpu_millis // 1000, tp.gpu_spec)
            result.failed[shape] = result.failed.get(shape, 0) + 1
        else:
            state.set_pod(pod, PodStatus.RUNNING, pod.node, pod.gpu_indices, pod.portion)
            allocated += tp.gpu_total
            meter.update(node)
        result.steps.append(FillStep(tp.name, node, arrived, allocated, meter.total))
        if progress is not None:
            progress(i + 1, len(arriving))
    result.seconds = time.perf_counter() - started
    result.left = leftover_by_node_type(state)
    return result


def _place_random(session, stmt, pod, rng: random.Random) -> str | None:
    """The first node that fits in a random order: uniform among the fitting nodes."""
    names = list(session.state.usage)
    rng.shuffle(names)
    usage = session.state.usage
    for name in names:
        fit = fit_on_node(session, pod, usage[name])
        if fit is not None and fit.now:
            stmt.allocate(pod, fit.node, fit.gpu_indices, fit.portion)
            return fit.node
    return None
