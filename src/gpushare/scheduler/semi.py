"""Semi-preemptible jobs: the job's gang minimum (``minMember``, per leaf subgroup when it
has subgroups) is its core, non-preemptible; the pods above it are its burst, preemptible.

The core is counted by position: per leaf, the first ``minMember`` allocated pods in the
job's order. The state charges their resources as non-preemptible use of the job's queues
(``QueueUsage.allocated_np``); a step about to be placed is checked against quota for the
pods of it that would join the core (:func:`core_part`); the victim search offers only a
semi-preemptible job's burst (``VictimQueue``'s protected core).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gpushare.model.job import Job
from gpushare.model.pod import ACTIVE_ALLOCATED, Pod
from gpushare.model.quantities import ZERO, Res


def _minimum(job: Job, pod: Pod) -> int:
    if not job.subgroups:
        return job.min_member
    leaf = job.subgroups.get(pod.subgroup or "")
    return 0 if leaf is None or leaf.min_member is None else leaf.min_member


def _fill(job: Job, pods: Iterable[Pod], counts: dict[str | None, int]) -> list[Pod]:
    """The pods, in order, that take a free core place (``counts``: places taken per
    leaf, updated)."""
    out: list[Pod] = []
    for pod in pods:
        leaf = pod.subgroup if job.subgroups else None
        taken = counts.get(leaf, 0)
        if taken < _minimum(job, pod):
            counts[leaf] = taken + 1
            out.append(pod)
    return out


def core_size(job: Job) -> int:
    """How many pods the core has when the job's gang is whole."""
    if not job.subgroups:
        return job.min_member
    return sum(s.min_member or 0 for s in job.subgroups.values() if not s.children)


def core_held(job: Job, pods: Iterable[Pod]) -> Res:
    """What the core of the job holds, of its pods as given (in the job's order)."""
    total = ZERO
    for pod in _fill(job, (p for p in pods if p.status in ACTIVE_ALLOCATED), {}):
        total = total + pod.held()
    return total


def core_part(job: Job, job_pods: Sequence[Pod], step: Sequence[Pod]) -> list[Pod]:
    """Of a step about to be placed, the pods that would join the core (the places the
    job's allocated pods leave free)."""
    counts: dict[str | None, int] = {}
    _fill(job, (p for p in job_pods if p.status in ACTIVE_ALLOCATED), counts)
    return _fill(job, step, counts)
