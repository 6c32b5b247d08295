"""One generator's scenario state in a job's victim search: the victims accumulated so far
(on top of those an earlier round recorded) and the scenarios built from them, least
disruptive first (the shape of KAI's accumulated scenario builder)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpushare.model import Pod
from gpushare.model.quantities import Quantities
from gpushare.scheduler.actions.common.capacity import Accumulated, Capacity
from gpushare.scheduler.actions.common.victim_queue import pod_quantities


@dataclass(slots=True)
class PodHashes:
    """Order-free 64-bit digests of sets of pods (stable across runs)."""

    _known: dict[str, int] = field(default_factory=dict)

    def of(self, pods: Sequence[Pod]) -> int:
        digest = 0
        for pod in pods:
            value = self._known.get(pod.key)
            if value is None:
                value = int.from_bytes(
                    hashlib.blake2b(pod.key.encode(), digest_size=8).digest(), "big"
                )
                self._known[pod.key] = value
            digest ^= value
        return digest


@dataclass(slots=True)
class Scenario:
    """Victims to simulate, their set's digest, and the capacity filter's verdict when
    it is already known (``None``: check it)."""

    victims: list[Pod]
    digest: int
    fits: bool | None


class AccumulatedVictims:
    """The recorded victims (from earlier rounds) and the victim steps taken since, with
    the indexes the scenarios read: victims per job, jobs per node, what each victim
    held, and the capacity the victims so far would free (``base``)."""

    __slots__ = ("accumulated", "accumulated_hash", "base", "by_job", "hashes",
                 "jobs_on_node", "latest", "quantities", "recorded", "recorded_hash",
                 "victim_jobs")

    def __init__(self, recorded: list[Pod], capacity: Capacity, hashes: PodHashes) -> None:
        self.recorded = recorded
        self.hashes = hashes
        self.base: Accumulated = capacity.accumulate(recorded)
        self.accumulated: list[Pod] = []
        self.by_job: dict[str, list[Pod]] = {}
        self.jobs_on_node: dict[str, set[str]] = {}
        self.victim_jobs: set[str] = {p.job for p in recorded}
        self.quantities: dict[str, Quantities] = {p.key: pod_quantities(p) for p in recorded}
        self.recorded_hash = hashes.of(recorded)
        self.accumulated_hash = 0
        self.latest: list[Pod] = []

    # -------------------------------------------------------------- scenarios
    def recorded_scenarios(self) -> list[Scenario]:
        """The victims the previous round needed, on their own."""
        if not self.recorded:
            return []
        return [Scenario(list(self.recorded), self.recorded_hash, self.base.ok())]

    def node_local(self) -> list[Scenario]:
        """Per node of the latest victim step, the whole victim steps of every job with a
        victim there (on top of the recorded ones)."""
        scenarios: list[Scenario] = []
        seen: set[int] = set()
        for node in sorted({p.node for p in self.latest if p.node is not None}):
            on_node = [p for j in sorted(self.jobs_on_node[node]) for p in self.by_job[j]]
            digest = self.recorded_hash ^ self.hashes.of(on_node)
            if digest not in seen:
                seen.add(digest)
                scenarios.append(Scenario(self.recorded + on_node, digest, None))
        return scenarios

    def on_hosting_nodes(self, pods: int) -> Scenario:
        """Only the victim steps on the first nodes (in the order their victims came) that
        could then host ``pods`` pods of the step between them: victims elsewhere free
        room no pod needs. Adding a victim that changes nothing gives the same scenario,
        which is not simulated again."""
        chosen_nodes: list[str] = []
        hostable = 0
        for node in self.jobs_on_node:
            count = self.base.pods_hostable(node)
            if count:
                chosen_nodes.append(node)
                hostable += count
                if hostable >= pods:
                    break
        chosen_jobs = sorted({j for node in chosen_nodes for j in self.jobs_on_node[node]})
        chosen = [p for j in chosen_jobs for p in self.by_job[j]]
        return Scenario(self.recorded + chosen, self.recorded_hash ^ self.hashes.of(chosen), None)

    def everything(self) -> Scenario:
        """Every victim so far."""
        return Scenario(self.recorded + self.accumulated,
                        self.recorded_hash ^ self.accumulated_hash, self.base.ok())

    # ------------------------------------------------------------- accounting
    def new_job_over(self, victim_job: str, max_jobs: int | None) -> bool:
        """Whether taking from ``victim_job`` would pass the cap on victim jobs."""
        return (
            max_jobs is not None
            and victim_job not in self.victim_jobs
            and len(self.victim_jobs) >= max_jobs
        )

    def add(self, victim_job: str, pods: list[Pod]) -> None:
        """One more victim step."""
        self.latest = pods
        self.victim_jobs.add(victim_job)
        for pod in pods:
            self.quantities[pod.key] = pod_quantities(pod)
            self.by_job.setdefault(pod.job, []).append(pod)
            if pod.node is not None:
                self.jobs_on_node.setdefault(pod.node, set()).add(pod.job)
        self.accumulated.extend(pods)
        self.accumulated_hash ^= self.hashes.of(pods)
        self.base.add(pods)
