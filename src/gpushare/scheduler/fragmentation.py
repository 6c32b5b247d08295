"""GPU fragmentation measured against a distribution of task shapes (FGD, ATC'23), and the
placement rules built on it.

A node's free GPU capacity is a *fragment* for a task shape when that shape cannot use it:
the node cannot host the task at all (wrong GPU model, too few GPUs with room, too little
CPU), or it can but some of its GPUs have less room than the task needs per GPU. With a
distribution of shapes ``p_t``, the node's fragmentation is the expected amount::

    F(node) = sum_t p_t * f_t(node)
    f_t     = all free milli-GPUs      if t asks for no GPU, or the node cannot host t
            = sum of free_i < gpu_t    if it can (the GPUs too small for t)

Placement rules (``Config.gpu_placement``):

* ``fgd``: the published rule: each fitting node scored ``⌊100·σ(−growth/1000)⌋`` where
  growth is ``F(after) - F(before)`` if the pod goes there, highest first; a fraction's GPU
  chosen the same way (lowest index on equal scores). The reference breaks equal node
  scores at random; here a fixed hash of the node name does (deterministic, and spread over
  node types as a random pick is).
* ``fragmentation``: the same node choice; a fraction's GPU by the exact growth of
  fragmentation (not its truncated score), then the fullest GPU. See ``frag_placement``
  and docs/performance.md for what was tried and measured.

Pure functions over plain numbers, memoised by node state: no I/O, deterministic.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpushare.model.pod import Pod
from gpushare.model.quantities import MILLI

#: The node label that names a node's GPU model (NVIDIA GPU feature discovery's key).
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"

FRAGMENTATION_POLICIES = ("fgd", "fragmentation")
#: Share of tasks the distribution must cover (FGD's "pod popularity threshold").
POPULARITY = 0.95
POPULARITY_STEP = 10


@dataclass(frozen=True, slots=True)
class TaskShape:
    """What a task asks for, as far as fragmentation is concerned."""

    cpu: int = 0  # millicores
    gpus: int = 0  # number of GPUs
    milli: int = 0  # milli-GPU on each of them (1000 for whole GPUs)
    memory: int = 0  # bytes
    products: frozenset[str] | None = None  # GPU models it may run on; None: any

    @property
    def gpu_total(self) -> int:
        return self.gpus * self.milli


def shape_of(pod: Pod) -> TaskShape:
    g = pod.gpu
    if g.whole:
        gpus, milli = g.whole, MILLI
    elif g.is_shared:
        gpus, milli = g.devices, g.portion or 1  # memory requests: at least a sliver
    else:
        gpus, milli = 0, 0
    products: frozenset[str] | None = None
    wanted = pod.node_selector.get(GPU_PRODUCT_LABEL)
    if wanted is not None:
        products = frozenset((wanted,))
    for key, values in pod.node_affinity:
        if key == GPU_PRODUCT_LABEL:
            allowed = frozenset(values)
            products = allowed if products is None else products & allowed
    return TaskShape(pod.cpu_millis, gpus, milli, pod.memory_bytes, products)


@dataclass(frozen=True, slots=True)
class TaskMix:
    """A distribution of task shapes: ``(shape, probability)``, most common first."""

    shapes: tuple[tuple[TaskShape, float], ...]
    with_memory: bool = False

    @classmethod
    def of(
        cls, shapes: Iterable[TaskShape], with_memory: bool = False,
        popularity: float = POPULARITY,
    ) -> TaskMix:
        """The most common shapes covering ``popularity`` of the tasks (taken ten at a time,
        as FGD does), renormalised. Memory is part of a shape only ``with_memory``."""
        counts: Counter[TaskShape] = Counter()
        for s in shapes:
            counts[s if with_memory else _without_memory(s)] += 1
        total = sum(counts.values())
        if not total:
            return cls((), with_memory)
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], _shape_order(kv[0])))
        taken = 0
        covered = 0
        while covered < popularity * total and taken < len(ranked):
            for _, n in ranked[taken: taken + POPULARITY_STEP]:
                covered += n
            taken = min(taken + POPULARITY_STEP, len(ranked))
        kept = ranked[:taken]
        return cls(tuple((s, n / covered) for s, n in kept), with_memory)


def _without_memory(s: TaskShape) -> TaskShape:
    return TaskShape(s.cpu, s.gpus, s.milli, 0, s.products)


def _shape_order(s: TaskShape) -> tuple[Any, ...]:
    return (s.cpu, s.gpus, s.milli, s.memory, sorted(s.products) if s.products else [])


def node_fragmentation(
    mix: TaskMix, model: str | None, cpu_free: int, mem_free: int, gpu_free: Iterable[int]
) -> float:
    """Expected milli-GPUs of this node that the mix's tasks cannot use (``F`` above)."""
    frees = tuple(gpu_free)
    total = sum(frees)
    if total == 0:
        return 0.0
    frag = 0.0
    for t, p in mix.shapes:
        if t.gpus == 0:
            frag += p * total  # a GPU-less task uses none of it
            continue
        if t.products is not None and model not in t.products:
            frag += p * total
            continue
        lacks = cpu_free < t.cpu or (mix.with_memory and mem_free < t.memory)
        roomy = 0
        small = 0
        for f in frees:
            if f >= t.milli:
                roomy += 1
            else:
                small += f
        if lacks or roomy < t.gpus:
            frag += p * total
        else:
            frag += p * small
    return frag


class FragmentationModel:
    """``node_fragmentation`` for one mix, memoised by node state."""

    __slots__ = ("_memo", "mix")

    def __init__(self, mix: TaskMix) -> None:
        self.mix = mix
        self._memo: dict[tuple[Any, ...], float] = {}

    def of(self, model: str | None, cpu: int, mem: int, frees: tuple[int, ...]) -> float:
        key = (model, cpu, mem if self.mix.with_memory else 0, tuple(sorted(frees)))
        found = self._memo.get(key)
        if found is None:
            if len(self._memo) > 500_000:
                self._memo.clear()
            found = self._memo[key] = node_fragmentation(self.mix, model, cpu, mem, frees)
        return found
