"""What a successful victim search found, and what its victims give up."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gpushare.model import Job, Pod
from gpushare.model.quantities import RESOURCES, Quantities


@dataclass(slots=True)
class Outcome:
    """What a successful simulation did."""

    preemptor: Job
    placed: list[Pod]
    evicted: list[Pod]  # victims that did not land again
    moved: list[Pod]  # victims placed again (Pipelined on their new node)
    victim_quantities: dict[str, Quantities]  # pod key -> what it held before eviction
    victim_order: list[Pod]  # evicted and moved victims, in the order the search took them

    def victim_jobs(self) -> dict[str, list[Pod]]:
        out: dict[str, list[Pod]] = {}
        for pod in self.victim_order:
            out.setdefault(pod.job, []).append(pod)
        return out


#: The action's verdict on a simulated outcome (accepted: kept; refused: rolled back).
Validator = Callable[[Outcome], bool]


def victim_units(
    outcome: Outcome, jobs: Mapping[str, Job], count_moved: bool
) -> dict[str, list[Quantities]]:
    """Per leaf queue, what the victims give up: each elastic pod on its own, a job's core
    as one unit. Moved victims give up nothing unless ``count_moved``."""
    units: dict[str, list[Quantities]] = {}
    moved = {p.key for p in outcome.moved}
    for job_key, pods in outcome.victim_jobs().items():
        job = jobs[job_key]
        core, elastic = split_core(job, pods)
        queue_units = units.setdefault(job.queue, [])
        for pod in elastic:
            if count_moved or pod.key not in moved:
                queue_units.append(outcome.victim_quantities[pod.key])
        core_total: Quantities | None = None
        for pod in core:
            if not count_moved and pod.key in moved:
                continue
            q = outcome.victim_quantities[pod.key]
            core_total = q if core_total is None else {r: core_total[r] + q[r] for r in RESOURCES}
        if core_total is not None:
            queue_units.append(core_total)
    return {q: u for q, u in units.items() if u}


def split_core(job: Job, pods: Sequence[Pod]) -> tuple[list[Pod], list[Pod]]:
    """Per leaf subgroup: the first ``minMember`` victims are the core, the rest elastic."""
    by_leaf: dict[str, list[Pod]] = {}
    for pod in pods:
        leaf = pod.subgroup if (pod.subgroup and job.subgroups) else ""
        by_leaf.setdefault(leaf, []).append(pod)
    core: list[Pod] = []
    elastic: list[Pod] = []
    for leaf, leaf_pods in by_leaf.items():
        if leaf and leaf in job.subgroups:
            minimum = job.subgroups[leaf].min_member or 0
        else:
            minimum = job.min_member
        if minimum >= len(leaf_pods):
            core.extend(leaf_pods)
        else:
            core.extend(leaf_pods[:minimum])
            elastic.extend(leaf_pods[minimum:])
    return core, elastic
