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
* ``fragmentation``: gpushare's rule, FGD's score over a figure that also sees CPU, plus
  what becomes of a shared GPU's room in the long run (``frag_placement`` has the key):

  - *CPU-aware figure* (``cpu_aware``): a GPU with room counts as usable for a task only
    while the node's CPU can feed it: the task's own cores for the first, then
    ``FEED_CORES`` for each further GPU. A node whose CPU is nearly gone has its idle GPUs
    counted as fragments, so the rule stops spending the CPU that its GPUs need.
  - *Room waste* ``W(r)``: the GPU capacity expected to stay unused in a room of ``r``
    milli-GPUs when the mix keeps arriving: tasks that fit take it in proportion to their
    share, and a room that few tasks fit (under ``RARE_SHARE`` of them) is filled only in
    proportion to that share::

        W(r) = r                                       no task fits r
             = (1 - a) r + a · sum_t q_t W(r - gpu_t)  a = min(1, P_fit(r) / RARE_SHARE)

    with ``q_t`` the shares of the fitting tasks. A fraction goes to the node and GPU
    where room waste grows least; FGD's score decides between nodes where it grows
    alike (and for whole GPUs, whose rooms stay empty).
  - *CPU reserve*: a GPU pod is placed first where what it leaves of the node's CPU still
    covers the node's free GPUs at ``CPU_RESERVE`` times the mix's cores per GPU.

  docs/performance.md has what each part adds on the openb trace.

Pure functions over plain numbers, memoised by node state: no I/O, deterministic.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpushare.model.gpu_products import GPU_PRODUCT_LABEL
from gpushare.model.pod import Pod
from gpushare.model.quantities import MILLI

__all__ = ["GPU_PRODUCT_LABEL"]

FRAGMENTATION_POLICIES = ("fgd", "fragmentation")
#: Share of tasks the distribution must cover (FGD's "pod popularity threshold").
POPULARITY = 0.95
POPULARITY_STEP = 10
#: ``fragmentation``: millicores each GPU beyond a task's first needs to count as usable.
FEED_CORES = 4000
#: ``fragmentation``: below this share of fitting tasks a GPU's room fills in proportion.
RARE_SHARE = 0.05
#: ``fragmentation``: the CPU a GPU pod should leave per free GPU, in the mix's cores per GPU.
CPU_RESERVE = 0.5


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


def cpu_aware_fragmentation(
    mix: TaskMix, model: str | None, cpu_free: int, mem_free: int, gpu_free: Iterable[int]
) -> float:
    """``node_fragmentation`` where a GPU with room is usable for a task only while the CPU
    feeds it: the task's cores for its first GPUs, ``FEED_CORES`` for each further one."""
    frees = sorted(gpu_free, reverse=True)
    total = sum(frees)
    if total == 0:
        return 0.0
    prefix = [0]
    for f in frees:
        prefix.append(prefix[-1] + f)
    frag = 0.0
    for t, p in mix.shapes:
        if t.gpus == 0 or (t.products is not None and model not in t.products):
            frag += p * total
            continue
        if cpu_free < t.cpu or (mix.with_memory and mem_free < t.memory):
            frag += p * total
            continue
        roomy = 0
        while roomy < len(frees) and frees[roomy] >= t.milli:
            roomy += 1
        if roomy < t.gpus:
            frag += p * total
            continue
        usable = roomy
        if t.cpu:
            copies = 1 + (cpu_free - t.cpu) // FEED_CORES
            usable = min(roomy, copies * t.gpus)
        frag += p * (total - prefix[usable])
    return frag


def room_waste(mix: TaskMix) -> tuple[float, ...]:
    """``W(r)`` for every room ``r`` of 0..1000 milli-GPUs (see the module's text)."""
    shares: dict[int, float] = {}
    for t, p in mix.shapes:
        if t.gpus:
            need = max(1, t.milli if t.gpus == 1 else MILLI)
            shares[need] = shares.get(need, 0.0) + p
    gpu_share = sum(shares.values())
    needs = sorted((m, p / gpu_share) for m, p in shares.items()) if gpu_share else []
    waste = [0.0] * (MILLI + 1)
    for r in range(MILLI + 1):
        fitting = [(m, p) for m, p in needs if m <= r]
        fit_share = sum(p for _, p in fitting)
        if not fitting:
            waste[r] = float(r)
            continue
        a = min(1.0, fit_share / RARE_SHARE)
        after = sum(p * waste[r - m] for m, p in fitting) / fit_share
        waste[r] = (1 - a) * r + a * after
    return tuple(waste)


def cores_per_gpu(mix: TaskMix) -> float:
    """The mix's millicores per whole GPU asked (its GPU tasks only); 0 without any."""
    cpu = gpus = 0.0
    for t, p in mix.shapes:
        if t.gpus:
            cpu += p * t.cpu
            gpus += p * t.gpu_total / MILLI
    return cpu / gpus if gpus else 0.0


class FragmentationModel:
    """A node's fragmentation for one mix, memoised by node state: FGD's figure, or with
    ``cpu_aware`` the one the ``fragmentation`` rule uses; with the mix's room waste and
    cores per GPU at hand (computed on first use)."""

    __slots__ = ("_cores_per_gpu", "_memo", "_room_waste", "cpu_aware", "mix")

    def __init__(self, mix: TaskMix, cpu_aware: bool = False) -> None:
        self.mix = mix
        self.cpu_aware = cpu_aware
        self._memo: dict[tuple[Any, ...], float] = {}
        self._room_waste: tuple[float, ...] | None = None
        self._cores_per_gpu: float | None = None

    def of(self, model: str | None, cpu: int, mem: int, frees: tuple[int, ...]) -> float:
        key = (model, cpu, mem if self.mix.with_memory else 0, tuple(sorted(frees)))
        found = self._memo.get(key)
        if found is None:
            if len(self._memo) > 500_000:
                self._memo.clear()
            figure = cpu_aware_fragmentation if self.cpu_aware else node_fragmentation
            found = self._memo[key] = figure(self.mix, model, cpu, mem, frees)
        return found

    @property
    def room_waste(self) -> tuple[float, ...]:
        if self._room_waste is None:
            self._room_waste = room_waste(self.mix)
        return self._room_waste

    @property
    def cores_per_gpu(self) -> float:
        if self._cores_per_gpu is None:
            self._cores_per_gpu = cores_per_gpu(self.mix)
        return self._cores_per_gpu
