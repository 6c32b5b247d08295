"""Reservation for gangs that wait too long, run by the allocate action before it places.

A job that has waited past its queue's threshold (``Queue.reservation_after``, else the
config's ``reservation_after``), is allowed by its queue's quota and limit, and whose next
gang step does not fit now, gets the nodes it would land on reserved
(``state.reservations``): nothing else is placed there, except backfill jobs that end
before the nodes are due (:mod:`..reserved`). The nodes are chosen to disturb least:
those expected to be free soonest, then those holding the fewest GPUs, filled first-fit
by node totals. A reservation stays until its job's gang is formed (spare pods of an
elastic job reserve nothing) or the job is gone, its threshold is switched off, or one of
its nodes goes away (then it is made again).
"""

from __future__ import annotations

from gpushare.model.job import Job
from gpushare.model.pod import Pod
from gpushare.model.quantities import MILLI
from gpushare.model.reservation import Reservation
from gpushare.scheduler.placement import place_step
from gpushare.scheduler.reserved import ReservedNodes, nodes_free_at
from gpushare.scheduler.session import Session
from gpushare.scheduler.state import NodeUsage

NEVER = float("inf")


def reservation_after(session: Session, job: Job) -> float | None:
    """Seconds the job waits before reserving (None: it never reserves)."""
    queue = session.state.queues.get(job.queue)
    after = None if queue is None else queue.reservation_after
    if after is None:
        after = session.config.reservation_after
    return None if after is None or after < 0 else after


def reservations_in_use(session: Session) -> bool:
    state = session.state
    return bool(state.reservations) or session.config.reservation_after is not None or any(
        q.reservation_after is not None for q in state.queues.values())


def update_reservations(session: Session) -> None:
    """Drop the reservations that no longer hold, make those now due, and refresh the
    session's view of the reserved nodes."""
    state = session.state
    for key in sorted(state.reservations):
        job = state.jobs.get(key)
        nodes = state.reservations[key].nodes
        if (job is None or not state.has_pending_pods(key) or session.gang(job).satisfied()
                or reservation_after(session, job) is None
                or any(n not in state.nodes or not state.nodes[n].ready for n in nodes)):
            del state.reservations[key]
    session.reserved = ReservedNodes.of(state, session.now)
    waiting = sorted(
        (job for job in state.jobs_with_pending_pods() if job.key not in state.reservations),
        key=lambda j: (j.created_at, j.key))
    for job in waiting:
        after = reservation_after(session, job)
        if after is None or session.now - job.created_at < after:
            continue
        step = _blocked_step(session, job)
        if step is None:
            continue
        nodes = choose_nodes(session, job, step, set(session.reserved.by_node))
        if nodes:
            state.reservations[job.key] = Reservation(job.key, nodes, session.now)
            session.reserved = ReservedNodes.of(state, session.now)


def _blocked_step(session: Session, job: Job) -> list[Pod] | None:
    """The job's next gang step when its quota allows it but it does not fit now."""
    queue = session.state.queues.get(job.queue)
    if queue is None or queue.children:
        return None
    gang = session.gang(job)
    if gang.satisfied():
        return None  # its gang is formed: spare pods reserve nothing
    step = gang.next_step()
    if not step or not session.proportion.check_capacity(job, step).ok:
        return None
    stmt = session.state.statement()
    fits = place_step(session, stmt, job, step).ok
    stmt.discard()
    return None if fits else step


def choose_nodes(session: Session, job: Job, step: list[Pod],
                 taken: set[str]) -> tuple[str, ...]:
    """The nodes the step would land on once they drain, least disruptive first; ``()``
    when the step cannot fit even on the empty nodes left."""
    state = session.state
    usages = [u for name, u in sorted(state.usage.items())
              if name not in taken and u.node.ready]

    def cost(u: NodeUsage) -> tuple[float, int, str]:
        free_at = nodes_free_at(state, (u.node.name,), session.now, job.key)
        held = u.node.gpus * MILLI - u.gpus_free_future_milli()
        return (NEVER if free_at is None else free_at, held, u.node.name)

    usages.sort(key=cost)
    room = {u.node.name: [u.node.gpus, u.node.cpu_millis, u.node.memory_bytes,
                          u.node.max_pods] for u in usages}
    used: set[str] = set()
    for pod in sorted(step, key=lambda p: (-_gpus(p), p.key)):
        need = (_gpus(pod), pod.cpu_millis, pod.memory_bytes, 1)
        for u in usages:
            name = u.node.name
            left = room[name]
            if pod.matches_labels(u.node.labels) and all(
                    n <= r for n, r in zip(need, left, strict=True)):
                room[name] = [r - n for n, r in zip(need, left, strict=True)]
                used.add(name)
                break
        else:
            return ()
    return tuple(sorted(used))


def _gpus(pod: Pod) -> int:
    """Whole GPUs the pod takes on an empty node (a shared request counts its devices)."""
    g = pod.gpu
    if g.whole:
        return g.whole
    return g.devices if g.is_shared else 0
