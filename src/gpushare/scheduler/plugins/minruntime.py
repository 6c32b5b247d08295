"""Min-runtime protection: a victim that started too recently may not be evicted.

A queue's ``preempt_min_runtime`` / ``reclaim_min_runtime`` of 0 means "not set here": the
value is inherited from the nearest ancestor that sets one (the scenario format and the
Queue CRD have no separate "unset" spelling, and a zero minimum protects nothing anyway).

* Preempt looks up the victim's leaf queue, then its ancestors.
* Reclaim resolves at the lowest common ancestor ("lca"): it starts at the child of the
  common ancestor on the victim's side and walks up. Two different top-level queues are
  siblings under an implicit root, so the victim's top-level queue decides.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpushare.model import Queue


def queue_path(queues: Mapping[str, Queue], name: str) -> list[Queue]:
    """The queues from the top level down to ``name`` (inclusive)."""
    path: list[Queue] = []
    seen: set[str] = set()
    current: str | None = name
    while current is not None and current in queues and current not in seen:
        seen.add(current)
        queue = queues[current]
        path.append(queue)
        current = queue.parent
    path.reverse()
    return path


def _first_set(path_up: Iterable[Queue], attribute: str) -> float:
    for queue in path_up:
        value = getattr(queue, attribute)
        if value and value > 0:
            return float(value)
    return 0.0


def preempt_min_runtime(queues: Mapping[str, Queue], victim_queue: str) -> float:
    path = queue_path(queues, victim_queue)
    return _first_set(reversed(path), "preempt_min_runtime")


def reclaim_min_runtime(
    queues: Mapping[str, Queue], reclaimer_queue: str, victim_queue: str
) -> float:
    reclaimer_path = queue_path(queues, reclaimer_queue)
    victim_path = queue_path(queues, victim_queue)
    if not reclaimer_path or not victim_path:
        return 0.0
    if reclaimer_path[0].name != victim_path[0].name:
        return _first_set([victim_path[0]], "reclaim_min_runtime")
    lca = 0
    for i in range(min(len(reclaimer_path), len(victim_path))):
        if reclaimer_path[i].name != victim_path[i].name:
            break
        lca = i
    if lca + 1 < len(victim_path):
        lca += 1
    return _first_set(reversed(victim_path[: lca + 1]), "reclaim_min_runtime")


def is_protected(running_seconds: float, min_runtime: float) -> bool:
    """Protected while the job's most recent start is younger than the minimum runtime."""
    return min_runtime > 0 and running_seconds < min_runtime
