"""Allocate: place pending jobs on free (or releasing) capacity, in fair order, with no
evictions. Each job is placed one gang step at a time; a job with more to place goes
back into the order and competes again."""

from __future__ import annotations

import math
from typing import Any

from gpushare.model.job import Job
from gpushare.model.pod import Pod
from gpushare.scheduler.actions.reservation import reservations_in_use, update_reservations
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
        until = session.held_until(job)
        if until is not None:
            session.set_reason(job, held_reason(until))
            continue
        if gang.held_back and not gang.next_step():
            session.set_reason(job, _backoff_reason(session, gang.held_back))
            continue
        if gang.next_step() is None:
            session.set_reason(
                job,
                f"job has {len(job.pods)} pods while {gang.min_total()} are required "
                "for gang scheduling",
            )
            continue
        out.append(job)
    return out


def held_reason(until: float) -> str:
    """Why a job held back as a whole (``Job.not_before``) waits. The same text for the
    whole wait (no countdown): a reason that changed every cycle would be written to the
    PodGroup and its pods every cycle. The time it ends is on the PodGroup's ``Requeued``
    condition."""
    if until == math.inf:
        return ("MaxRuntimeExceeded: the job ran past its maximum runtime and failed; "
                "it is not scheduled again")
    return ("MaxRuntimeExceeded: the job ran past its maximum runtime and was requeued; "
            "it is held back until its requeue delay is over (see its PodGroup's Requeued "
            "condition)")


def _backoff_reason(session: Session, held: list[Pod]) -> str:
    backoff = session.state.bind_backoff
    pod = held[0]
    failures = backoff.failures.get(pod.key, 0)
    left = backoff.resume_at.get(pod.key, backoff.cycle) - backoff.cycle
    return (f"BindBackOff: binding pod {pod.name} failed {failures} time(s) in a row; "
            f"it is considered again in {left} cycle(s)")


def step_shape(step: list[Pod]) -> tuple[Any, ...]:
    """What placing a step depends on: every pod's requests and node selector."""
    return tuple(
        (p.gpu, p.cpu_millis, p.memory_bytes, p.constraints())
        for p in step
    )


def allocate(session: Session) -> None:
    if reservations_in_use(session):
        update_reservations(session)
    jobs = eligible_jobs(session)
    order = JobQueue(session, jobs)
    # Allocation only ever takes capacity, so a step shape that found no room once finds
    # none for the rest of the action: later jobs of that shape are not searched again.
    failed: dict[int, tuple[str, int, str]] = {}  # by shape id (``_QueuedShapes``)
    # Once every job still queued has a step of a shape that failed, nothing more can be
    # placed, so none of them changes the state: each only gets its reason, which depends
    # on the state and its own step. The rest is then handed out without the fair order.
    shapes = _QueuedShapes(session, jobs)
    for job, step in order.with_steps():
        shapes.popped(job)
        if _try_job(session, job, step, failed, shapes):
            order.push(job)
        if shapes.open == 0:
            for rest in order.drain():
                shapes.popped(rest)
                rest_step = session.gang(rest).next_step()
                if rest_step:
                    _try_job(session, rest, rest_step, failed, shapes)
            break


def _try_job(session: Session, job: Job, step: list[Pod],
             failed: dict[int, tuple[str, int, str]], shapes: _QueuedShapes) -> bool:
    """Place the job's next step if it fits; True: placed, with more to place."""
    check = session.proportion.check_capacity(job, step)
    if not check.ok:
        session.set_reason(job, f"{check.reason}: {check.message}")
        return False
    shape = shapes.shape[job.key]
    if shape in failed:
        reason, index, pod_key = failed[shape]
        session.set_reason(job, reason.replace(pod_key, step[index].key))
        return False
    stmt = session.state.statement()
    result = place_step(session, stmt, job, step)
    if not result.ok:
        stmt.discard()
        session.set_reason(job, result.reason)
        failed[shape] = (result.reason, result.placed, step[result.placed].key)
        shapes.fail(shape)
        return False
    stmt.commit()
    session.clear_reason(job)
    if session.gang(job).has_pending():
        shapes.queue(job)
        return True
    return False


class _QueuedShapes:
    """The step shape of every queued job (as a small number: one per distinct shape,
    cheaper to look up than the shape), how many queued jobs have each shape, and how
    many of them have a shape that has not failed (``open``)."""

    def __init__(self, session: Session, jobs: list[Job]) -> None:
        self.session = session
        self.ids: dict[tuple[Any, ...], int] = {}
        self.shape: dict[str, int] = {}
        self.count: dict[int, int] = {}
        self.failed: set[int] = set()
        self.open = 0
        for job in jobs:
            self.queue(job)

    def queue(self, job: Job) -> None:
        step = self.session.gang(job).next_step()
        if not step:
            return  # passed over when popped
        key = step_shape(step)
        if self.session.proportion.gpu_types is not None:
            # Per-type limits make a step's room depend on its queue too.
            key += (job.queue,)
        shape = self.ids.setdefault(key, len(self.ids))
        self.shape[job.key] = shape
        self.count[shape] = self.count.get(shape, 0) + 1
        if shape not in self.failed:
            self.open += 1

    def popped(self, job: Job) -> None:
        shape = self.shape.get(job.key)
        if shape is None:
            return
        self.count[shape] -= 1
        if shape not in self.failed:
            self.open -= 1

    def fail(self, shape: int) -> None:
        self.failed.add(shape)
        self.open -= self.count.get(shape, 0)
