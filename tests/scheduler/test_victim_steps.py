"""Victim steps: which pods of a job are offered next, never breaking a gang."""

from __future__ import annotations

from gpushare.model import Job, Pod, PodStatus, SubGroup
from gpushare.model.pod import GpuRequest
from gpushare.scheduler.actions.common.signatures import FailedJobs
from gpushare.scheduler.actions.common.steps import VictimSteps


def _job(min_member: int = 1, subgroups: dict[str, SubGroup] | None = None,
         min_subgroup: int | None = None) -> Job:
    job = Job(name="j", namespace="ns", queue="q", min_member=min_member,
              min_subgroup=min_subgroup, subgroups=subgroups or {})
    for sub in job.subgroups.values():
        if sub.parent:
            job.subgroups[sub.parent].children.append(sub.name)
    return job


def _pods(n: int, subgroup: list[str | None] | None = None, order: list[int | None] | None = None):
    return [
        Pod(name=f"p{i}", namespace="ns", job="ns/j", index=i, status=PodStatus.RUNNING,
            node="n0", subgroup=(subgroup or [None] * n)[i], task_order=(order or [None] * n)[i])
        for i in range(n)
    ]


def _drain(steps: VictimSteps, taken: set[str]) -> list[list[str]]:
    out = []
    while True:
        step = steps.next_step()
        if not step:
            return out
        out.append([p.name for p in step])
        taken.update(p.key for p in step)


def _steps(job: Job, pods: list[Pod]) -> tuple[VictimSteps, set[str]]:
    taken: set[str] = set()
    return VictimSteps(job, pods, lambda p: p.key not in taken), taken


def test_elastic_pods_go_one_at_a_time_from_the_far_end_then_the_core():
    steps, taken = _steps(_job(min_member=1), _pods(3))
    assert _drain(steps, taken) == [["p2"], ["p1"], ["p0"]]


def test_task_order_decides_the_far_end():
    # Ranked pods come first in task order (higher rank first), so the unranked one and
    # then the lowest rank are given up first.
    steps, taken = _steps(_job(min_member=1), _pods(3, order=[1, 5, None]))
    assert _drain(steps, taken) == [["p2"], ["p0"], ["p1"]]


def test_a_gang_at_its_minimum_goes_whole():
    steps, taken = _steps(_job(min_member=3), _pods(3))
    assert _drain(steps, taken) == [["p2", "p1", "p0"]]


def test_surplus_taken_from_the_last_subgroup_first():
    subs = {"a": SubGroup("a", min_member=1), "b": SubGroup("b", min_member=1)}
    steps, taken = _steps(_job(subgroups=subs), _pods(4, subgroup=["a", "a", "b", "b"]))
    drained = _drain(steps, taken)
    assert drained[:2] == [["p3"], ["p1"]]
    assert sorted(drained[2]) == ["p0", "p2"] and len(drained) == 3


def test_a_surplus_member_of_a_min_subgroup_set_goes_whole():
    subs = {"a": SubGroup("a", min_member=2), "b": SubGroup("b", min_member=2)}
    steps, taken = _steps(
        _job(subgroups=subs, min_subgroup=1), _pods(4, subgroup=["a", "a", "b", "b"])
    )
    assert _drain(steps, taken)[0] == ["p3", "p2"]


def test_satisfied_follows_what_was_taken():
    steps, taken = _steps(_job(min_member=2), _pods(3))
    assert steps.satisfied()
    taken.update({"ns/p2"})
    assert steps.satisfied()
    taken.update({"ns/p1"})
    assert not steps.satisfied()


def test_surplus_only_never_offers_the_core():
    steps, taken = _steps(_job(min_member=2), _pods(3))
    assert [p.name for p in steps.surplus_only()] == ["p2"]
    taken.add("ns/p2")
    assert steps.surplus_only() == []


def test_failed_shapes_skip_jobs_that_are_not_easier():
    small = Pod(name="s", namespace="ns", job="ns/j", index=0, gpu=GpuRequest(whole=1))
    big = Pod(name="b", namespace="ns", job="ns/j", index=1, gpu=GpuRequest(whole=2))
    failed = FailedJobs()
    failed.add("shape", [big])
    assert failed.not_easier("shape", [big])
    assert failed.not_easier("shape", [big, small])
    assert not failed.not_easier("shape", [small])
    assert not failed.not_easier("other", [big])
