"""Reclaim per GPU type: a victim's GPUs on a node of a type some queue names are taken
only from a branch that holds more of that type than its share of it.

KAI's reclaim rules (:mod:`.reclaimable`, :mod:`.steady`) read the queues' total ``gpu``
figures. Where queues give figures per type (:mod:`.gpu_types`), a found reclaim must
also keep to these, per type ``T`` of the evicted victims:

* each branch it takes ``T`` GPUs from (the victim's queue, or its ancestor where the
  victim's and the reclaimer's branches split) still held more ``T`` GPUs than its share
  of ``T`` (quota or fair share, capped by the limit) before its last victim of ``T``
  went (KAI's rule per unit, with the largest unit last); so a queue within its L40S
  share keeps its L40S while it is over its H100 share;
* the reclaimer's leaf queue, with what it placed, holds no more ``T`` GPUs than its
  share of ``T``: a queue over its H100 share reclaims no H100.

A reclaim the ``gpu`` rules refuse may still go on the per-type path (below): the
reclaimer has room under its share of a named type for its whole step, and every victim
holds GPUs of named types taken by the rules above.

Victims moved elsewhere (consolidating reclaim) are not taken. Read on the simulated
outcome, inside the search's statement: the victims are Releasing, the reclaimer's pods
placed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from fractions import Fraction

from gpushare.model.job import Job
from gpushare.model.pod import ACTIVE_ALLOCATED, Pod
from gpushare.model.quantities import MILLI
from gpushare.scheduler.plugins.proportion.gpu_types import GpuTypes, pod_types

F0 = Fraction(0)


def _branch(types: GpuTypes, mine: set[str], victim_queue: str) -> str:
    """The victim's queue or its ancestor where its branch splits from the reclaimer's."""
    queues = types.state.queues
    chain = types.state.ancestors(victim_queue)
    for name in chain:
        parent = queues[name].parent
        if parent is None or parent not in queues or parent in mine:
            return name
    return chain[-1]


def reclaim_allowed(types: GpuTypes, reclaimer_queue: str, placed: Iterable[Pod],
                    evicted: Iterable[Pod]) -> bool:
    """Whether a found reclaim keeps to the per-type rules (see the module)."""
    state = types.state
    mine = set(state.ancestors(reclaimer_queue))
    taken: dict[tuple[str, str], tuple[Fraction, Fraction]] = {}
    for pod in evicted:
        kind = types.node_type.get(pod.node) if pod.node else None
        job = state.jobs.get(pod.job)
        gpus = Fraction(pod.held().gpu, MILLI)
        if kind is None or kind not in types.capacity or job is None or not gpus:
            continue
        key = (_branch(types, mine, job.queue), kind)
        total, biggest = taken.get(key, (F0, F0))
        taken[key] = (total + gpus, max(biggest, gpus))
    if not taken:
        return True
    for (branch, kind), (_, biggest) in taken.items():
        if types.room(branch, kind) >= biggest:
            return False  # held no more than its share before its last victim went
    kinds = {kind for _, kind in taken}
    for pod in placed:
        kind = types.node_type.get(pod.node) if pod.node else None
        if kind in kinds and kind is not None and types.room(reclaimer_queue, kind) < 0:
            return False
    return True


def victim_allowed(types: GpuTypes, reclaimer_queue: str, victim: Job) -> bool:
    """The search's pre-filter: a victim job qualifies when some GPU pod of it holds a
    type its branch holds more of than its share (or a type no queue names, or it holds
    no GPU of a named type at all); :func:`reclaim_allowed` decides on the found set."""
    state = types.state
    mine = set(state.ancestors(reclaimer_queue))
    branch = _branch(types, mine, victim.queue)
    typed = False
    for pod in state.job_pods(victim):
        kind = types.node_type.get(pod.node) if pod.node else None
        if pod.status not in ACTIVE_ALLOCATED or not pod.held().gpu:
            continue
        if kind is None or kind not in types.capacity:
            return True
        typed = True
        if types.room(branch, kind) < 0:
            return True
    return not typed


# ------------------------------------------------------------------- the per-type path
#
# A reclaim the ``gpu`` rules refuse (say the reclaimer's queue is over its total fair
# share while under its H100 share) may still go on the per-type path: the reclaimer's
# leaf has room under its share of a named type for the whole step, every victim it takes
# holds GPUs on named types, and :func:`reclaim_allowed` holds.


def reclaim_kinds(types: GpuTypes, job: Job, step: Sequence[Pod],
                  gpu_memory: int | None) -> frozenset[str]:
    """The named types the step may use where the job's leaf queue has room under its
    share for the whole step (empty: no per-type path)."""
    gpu_pods = [p for p in step if p.gpu.wants_gpu]
    if not gpu_pods:
        return frozenset()
    allowed: frozenset[str] | None = None
    for pod in gpu_pods:
        kinds = pod_types(pod)
        if kinds is not None:
            allowed = kinds if allowed is None else allowed & kinds
    asked = sum((p.gpu.gpus_exact(gpu_memory) for p in gpu_pods), F0)
    named = types.types if allowed is None else sorted(allowed & set(types.types))
    return frozenset(k for k in named if types.room(job.queue, k) >= asked)


def branch_over(types: GpuTypes, reclaimer_queue: str, victim_queue: str,
                kinds: frozenset[str]) -> bool:
    """Whether the victim's branch holds more than its share of one of ``kinds``."""
    branch = _branch(types, set(types.state.ancestors(reclaimer_queue)), victim_queue)
    return any(types.room(branch, k) < 0 for k in kinds)


def reclaim_by_type(types: GpuTypes, reclaimer_queue: str, placed: Iterable[Pod],
                    evicted: Sequence[Pod]) -> bool:
    """The per-type path's verdict on a found reclaim: every victim holds GPUs on a named
    type, and :func:`reclaim_allowed` holds."""
    for pod in evicted:
        kind = types.node_type.get(pod.node) if pod.node else None
        if kind is None or kind not in types.capacity or not pod.held().gpu:
            return False
    return bool(evicted) and reclaim_allowed(types, reclaimer_queue, placed, evicted)
