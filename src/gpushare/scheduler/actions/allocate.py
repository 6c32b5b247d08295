"""Allocate: place pending jobs on free (or releasing) capacity, in fair order, with no
evictions. Each job is placed one gang step at a time; a job with more to place goes
back into the order and competes again."""

from __future__ import annotations

from typing import Any

from gpushare.model.job import Job
from gpushare.model.pod import Pod
from gpushare.scheduler.ordering import JobQueue
from gpushare.scheduler.placement import place_step
from gpushare.scheduler.session import Session


def eligible_jobs(session: Session) -> list[Job]:
    """Jobs with pending pods whose gang can be formed, in a leaf queue that exists.

    Jobs that cannot be considered get their pending reason here.
    """
    state = session.state
    out: list[Job] = []
    for job in state.jobs_with_pending_pods():
        queue = state.queues.get(job.queue)
        if queue is None:
            session.set_reason(job, f"QueueDoesNotExist: queue {job.queue} does not exist")
            continue
        if queue.children:
            session.set_reason(job, f"queue {job.queue} is not a leaf queue")
            continue
        gang = session.gang(job)
        if gang.next_step() is None:
            session.set_reason(
                job,
                f"job has {len(job.pods)} pods while {gang.min_total()} are required "
                "for gang scheduling",
            )
            continue
        out.append(job)
    return out


def step_shape(step: list[Pod]) -> tuple[Any, ...]:
    """What placing a step depends on: every pod's requests and node selector."""
    return tuple(
        (p.gpu, p.cpu_millis, p.memory_bytes, p.constraints())
        for p in step
    )


def allocate(session: Session) -> None:
    state = session.state
    order = JobQueue(session, eligible_jobs(session))
    # Allocation only ever takes capacity, so a step shape that found no room once finds
    # none for the rest of the action: later jobs of that shape are not searched again.
    failed: dict[tuple[Any, ...], tuple[str, int, str]] = {}
    for job, step in order.with_steps():
        check = session.proportion.check_capacity(job, step)
        if not check.ok:
            session.set_reason(job, f"{check.reason}: {check.message}")
            continue
        shape = step_shape(step)
        if shape in failed:
            reason, index, pod_key = failed[shape]
            session.set_reason(job, reason.replace(pod_key, step[index].key))
            continue
        stmt = state.statement()
        result = place_step(session, stmt, job, step)
        if not result.ok:
            stmt.discard()
            session.set_reason(job, result.reason)
            failed[shape] = (result.reason, result.placed, step[result.placed].key)
            continue
        stmt.commit()
        session.clear_reason(job)
        if session.gang(job).has_pending():
            order.push(job)


