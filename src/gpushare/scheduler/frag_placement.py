"""Placement under the fragmentation rules (``fgd``, ``fragmentation``; see
``fragmentation.py``): which node and GPU a pod goes to.

Every fitting node gets a key, smallest best::

    (waits for releases, CPU-only pod on a GPU node, short of CPU reserve, room-waste
     growth, fragmentation score, fixed node order, name)

Room-waste growth is 0 for whole GPUs and under ``fgd``, so there the score decides.

The choice over the whole cluster goes through ``FragIndex``: per pod shape a heap of node
keys, where only nodes whose usage changed since that shape last looked are scored again
(``NodeUsage.version``), so a placement costs a pass of version checks plus a few scorings
rather than a scoring of every node. ``ordered_fits`` gives the same order by scoring all.

The distribution of task shapes comes from ``set_task_mix`` (a simulator that knows its
workload) or, in the live scheduler, from the most recent pods placement was asked about
(``RECENT_WINDOW`` of them, distribution refreshed every ``RECENT_REFRESH`` new ones).
"""

from __future__ import annotations

import heapq
import math
import zlib
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpushare.model.pod import Pod
from gpushare.model.quantities import MILLI
from gpushare.scheduler.fragmentation import (
    CPU_RESERVE,
    GPU_PRODUCT_LABEL,
    FragmentationModel,
    TaskMix,
    TaskShape,
    shape_of,
)
from gpushare.scheduler.nodeplacement import BINPACK, Key
from gpushare.scheduler.state import ClusterState, NodeUsage

RECENT_WINDOW = 2000
RECENT_REFRESH = 200
#: ``fragmentation``: nodes whose room-waste growth for a fraction differs by less than
#: this many milli-GPUs count as equal (then FGD's score, then the fixed node order).
WASTE_STEP = 20


@dataclass(frozen=True, slots=True)
class FragmentationStrategy:
    """A placement strategy whose node and GPU choice is made here (``chooses_nodes``);
    the score, index key and GPU order it supplies to the rest of the core (the node
    index's buckets, reasons, victim searches over given nodes) are binpack's."""

    name: str
    shared_gpus_first: bool = False
    allows_consolidation: bool = True
    chooses_nodes: bool = True

    def scores(self, figures: Sequence[tuple[int, int]]) -> list[float]:
        return BINPACK.scores(figures)

    def index_key(self, free: int, total: int, name: str) -> Key:
        return BINPACK.index_key(free, total, name)

    def index_start(self, need: int) -> Key | None:
        return BINPACK.index_start(need)

    def gpu_order(self, fill: int) -> int:
        return BINPACK.gpu_order(fill)


FGD = FragmentationStrategy("fgd")
FRAGMENTATION = FragmentationStrategy("fragmentation")


@dataclass(slots=True)
class Choice:
    key: tuple[Any, ...]
    node: str
    now: bool
    gpu_indices: tuple[int, ...]
    portion: int
    has_shared_fit: bool


def published_score(growth: float) -> int:
    """FGD's node score for a growth of fragmentation (milli-GPUs): ``⌊100·σ(−growth/1000)⌋``
    (higher is better; equal scores are ties)."""
    x = -growth / 1000
    if x < -700:
        return 0
    return int(100 / (1 + math.exp(-x)))


def _tie(name: str) -> int:
    """A fixed pseudo-random order of nodes for equal scores (the reference picks at random)."""
    return zlib.crc32(name.encode())


def score_node(
    fm: FragmentationModel, policy: str, pod: Pod, usage: NodeUsage, fit: Any,
) -> Choice:
    """The key and GPUs of placing ``pod`` on a node it fits (``fit`` from ``fit_on_node``).

    Node: FGD's published score of the growth of fragmentation, equal scores by ``_tie``.
    GPU of a fraction: ``fgd`` as published (the same truncated score per GPU, lowest index
    on ties); ``fragmentation`` the least growth of room waste, then of fragmentation, then
    the fullest GPU; its node key puts first the nodes where the pod leaves the CPU
    reserve (``fragmentation.CPU_RESERVE``), then, for a fraction, the node where room
    waste grows least (in ``WASTE_STEP`` steps), and only then FGD's score.
    """
    node = usage.node
    model = node.labels.get(GPU_PRODUCT_LABEL)
    cpu = usage.cpu_free_future()
    mem = usage.mem_free_future()
    frees = [usage.gpu_free_future(i) for i in range(node.gpus)]
    before = fm.of(model, cpu, mem, tuple(frees))
    cpu_after = cpu - pod.cpu_millis
    mem_after = mem - pod.memory_bytes
    g = pod.gpu
    indices = fit.gpu_indices
    ours = policy == "fragmentation"
    waste_growth = 0.0
    if g.is_shared and g.devices == 1:
        portion = fit.portion
        waste = fm.room_waste if ours else ()
        best: tuple[Any, ...] | None = None
        best_after = 0.0
        tried: set[tuple[bool, int]] = set()
        for i in range(node.gpus):
            free = frees[i]
            if free < portion or (usage.gpu_shared[i] == 0 and free != MILLI):
                continue
            now = portion <= usage.gpu_free_now(i)
            if (now, free) in tried:
                continue  # same room as a lower GPU: same outcome
            tried.add((now, free))
            frees[i] = free - portion
            after = fm.of(model, cpu_after, mem_after, tuple(frees))
            frees[i] = free
            if ours:
                cand: tuple[Any, ...] = (not now, round(waste[free - portion] - waste[free], 6),
                                         round(after - before, 6), free - portion, i)
            else:
                cand = (not now, -published_score(after - before), 0, 0, i)
            if best is None or cand < best:
                best, best_after = cand, after
        assert best is not None  # fit_on_node found a GPU
        growth = best_after - before
        indices = (best[4],)
        now_all = fit.now and not best[0]
        if ours:
            waste_growth = best[1]
            frees[indices[0]] -= portion
    else:
        take = fit.portion if indices else 0
        for i in indices:
            frees[i] -= take
        growth = fm.of(model, cpu_after, mem_after, tuple(frees)) - before
        now_all = fit.now
    cpu_pod_on_gpu_node = not g.wants_gpu and node.gpus > 0
    short_of_cpu = False
    if ours and g.wants_gpu:
        short_of_cpu = cpu_after < sum(frees) / MILLI * fm.cores_per_gpu * CPU_RESERVE
    # room-waste growth is 0 for whole GPUs and under ``fgd``: there the score decides
    key = (not now_all, cpu_pod_on_gpu_node, short_of_cpu, round(waste_growth / WASTE_STEP),
           -published_score(growth), _tie(node.name), node.name)
    shared_fit = fit.has_shared_fit
    if g.is_shared and g.devices == 1:
        shared_fit = usage.gpu_shared[indices[0]] > 0
    return Choice(key, node.name, now_all, tuple(indices), fit.portion, shared_fit)


# ------------------------------------------------------------------ task mix
@dataclass(slots=True)
class RecentShapes:
    """The shapes of the pods placed lately and the task mix learnt from them."""

    shapes: OrderedDict[str, TaskShape] = field(default_factory=OrderedDict)
    new: int = 0
    mix: TaskMix | None = None


def set_task_mix(state: ClusterState, mix: TaskMix | None) -> None:
    """Fix the distribution of task shapes the fragmentation rules use (None: learn it
    from recent pods)."""
    state.kept.task_mix = mix


def _mix_for(state: ClusterState, pod: Pod) -> TaskMix:
    fixed = state.kept.task_mix
    if fixed is not None:
        return fixed
    recent = state.kept.of(FragKept).recent
    if pod.key not in recent.shapes:
        recent.shapes[pod.key] = shape_of(pod)
        recent.new += 1
        while len(recent.shapes) > RECENT_WINDOW:
            recent.shapes.popitem(last=False)
    if recent.mix is None or recent.new >= RECENT_REFRESH:
        recent.mix = TaskMix.of(recent.shapes.values())
        recent.new = 0
    return recent.mix


# --------------------------------------------------------------------- index
class FragIndex:
    """Per pod shape, the fitting nodes' keys, re-scored only where usage changed."""

    def __init__(self, state: ClusterState, policy: str, mix: TaskMix) -> None:
        self.state = state
        self.policy = policy
        self.mix = mix
        self.model = FragmentationModel(mix, cpu_aware=policy == "fragmentation")
        self.node_version = state.node_version
        self.shapes: dict[tuple[Any, ...], _ShapeEntry] = {}

    @classmethod
    def of(cls, state: ClusterState, policy: str, mix: TaskMix) -> FragIndex:
        indexes = state.kept.of(FragKept).indexes
        index = indexes.get(policy)
        if index is None or index.mix is not mix or index.node_version != state.node_version:
            index = indexes[policy] = cls(state, policy, mix)
        return index


@dataclass(slots=True)
class _ShapeEntry:
    heap: list[tuple[Any, ...]] = field(default_factory=list)
    seen: dict[str, int] = field(default_factory=dict)
    current: dict[str, Choice] = field(default_factory=dict)


def pod_shape_key(pod: Pod, pipeline_only: bool) -> tuple[Any, ...]:
    return (pod.gpu, pod.cpu_millis, pod.memory_bytes, pod.constraints(), pipeline_only)


def best_choice(session: Any, pod: Pod, pipeline_only: bool,
                fit_on_node: Any) -> Choice | None:
    """The best node for the pod over the whole cluster, through the index."""
    state = session.state
    policy = session.config.placement_for(pod)[0]
    mix = _mix_for(state, pod)
    index = FragIndex.of(state, policy, mix)
    skey = pod_shape_key(pod, pipeline_only)
    entry = index.shapes.get(skey)
    if entry is None:
        entry = index.shapes[skey] = _ShapeEntry()
    seen = entry.seen
    current = entry.current
    heap = entry.heap
    fm = index.model
    for name, usage in state.usage.items():
        v = usage.version
        if seen.get(name) == v:
            continue
        seen[name] = v
        fit = fit_on_node(session, pod, usage, pipeline_only)
        if fit is None:
            current.pop(name, None)
            continue
        choice = score_node(fm, policy, pod, usage, fit)
        current[name] = choice
        heapq.heappush(heap, choice.key)
    while heap:
        top = heap[0]
        found = current.get(top[-1])
        if found is not None and found.key == top:
            break
        heapq.heappop(heap)
    else:
        return None
    if len(heap) > 4 * len(current) + 1024:
        entry.heap = [c.key for c in current.values()]
        heapq.heapify(entry.heap)
    return found


def ordered_choices(
    session: Any, pod: Pod, names: Iterable[str], pipeline_only: bool, fit_on_node: Any,
) -> list[Choice]:
    """Every node of ``names`` the pod fits on, best first (scores each)."""
    state = session.state
    policy = session.config.placement_for(pod)[0]
    mix = _mix_for(state, pod)
    fm = FragIndex.of(state, policy, mix).model
    out = []
    for name in names:
        usage = state.usage.get(name)
        if usage is None:
            continue
        fit = fit_on_node(session, pod, usage, pipeline_only)
        if fit is not None:
            out.append(score_node(fm, policy, pod, usage, fit))
    out.sort(key=lambda c: c.key)
    return out


@dataclass(slots=True)
class FragKept:
    """What the fragmentation rules keep on the state for later cycles
    (``state.kept.of(FragKept)``): per rule, the index of fitting nodes per pod shape, and
    the shapes of the pods placed lately."""

    indexes: dict[str, FragIndex] = field(default_factory=dict)
    recent: RecentShapes = field(default_factory=RecentShapes)
