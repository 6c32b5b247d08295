"""Jobs (pod groups) with gangs and subgroup trees."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class SubGroup:
    """A node of a job's gang tree.

    A leaf has ``min_member`` and pods; a subgroup with children is satisfied when
    ``min_subgroup`` of them are (all of them when ``None``).
    """

    name: str
    parent: str | None = None
    min_member: int | None = None
    min_subgroup: int | None = None
    children: list[str] = field(default_factory=list)


@dataclass(slots=True, eq=False)
class Job:
    name: str
    namespace: str
    queue: str
    priority: int = 50
    preemptible: bool = True
    #: Semi-preemptible: its gang minimum (the core) is non-preemptible and counts as
    #: such against quota, the pods above it are preemptible (``scheduler/semi.py``);
    #: ``preemptible`` is then True.
    semi_preemptible: bool = False
    min_member: int = 1  # gang size when the job has no subgroups
    min_subgroup: int | None = None  # over top-level subgroups, when it has them
    created_at: float = 0.0  # caller's clock; smaller is older
    preemption_delay: float = 0.0  # seconds; the job may not trigger evictions before this age
    #: False when its PriorityClass says ``preemptionPolicy: Never``: nothing is evicted
    #: to place it (it still takes what is free).
    may_preempt: bool = True
    staleness_grace: float | None = None  # seconds; None: the config's; negative: never
    stale_since: float | None = None  # when it was first seen below its gang size
    last_eviction_at: float | None = None
    #: Seconds it declares it runs at most (None: not declared); only such a job may be
    #: started on nodes reserved for another job, and only if it ends before they are due.
    expected_runtime: float | None = None
    #: When it last became pending (its pods evicted, say); None: ``created_at``. Job
    #: aging counts the wait from here.
    pending_since: float | None = None
    #: Not to be placed before this time (caller's clock): a job requeued after running
    #: past its maximum runtime waits out its delay; ``math.inf``: never (it failed).
    #: None: no such hold.
    not_before: float | None = None
    subgroups: dict[str, SubGroup] = field(default_factory=dict)  # in tie-break order
    pods: list[str] = field(default_factory=list)  # pod keys, in the order given

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def waiting_since(self) -> float:
        return self.created_at if self.pending_since is None else self.pending_since

    def top_subgroups(self) -> list[str]:
        return [s.name for s in self.subgroups.values() if s.parent is None]
