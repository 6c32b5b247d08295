"""Stale-gang eviction: a running job that has fallen below its gang size for longer than
its grace period loses all its pods (its workload re-creates them together).

A job is stale when it has pods on nodes, none Succeeded (a gang that is finishing is not
broken), and its active pods no longer satisfy its gang. The grace period is the job's
own (``stalenessGracePeriodSeconds``) or the config's; a negative one never evicts. The
time it became stale is kept on the job (``stale_since``) and reported by the cycle.
"""

from __future__ import annotations

from gpushare.model import ACTIVE_ALLOCATED, Job, PodStatus
from gpushare.scheduler.actions.common.steps import VictimSteps
from gpushare.scheduler.session import Session

ACTION = "stalegangeviction"


def is_stale(session: Session, job: Job) -> bool:
    pods = session.state.job_pods(job)
    active = 0
    for pod in pods:
        status = pod.status
        if status is PodStatus.SUCCEEDED:
            return False
        if status in ACTIVE_ALLOCATED:
            active += 1
    if not active:
        return False
    if not job.subgroups:  # one pod set: its gang is min_member active pods
        return active < job.min_member
    return not VictimSteps(job, pods, lambda p: p.status in ACTIVE_ALLOCATED).satisfied()


def grace_of(session: Session, job: Job) -> float:
    if job.staleness_grace is not None:
        return job.staleness_grace
    return session.config.staleness_grace_seconds


def evict_stale_gangs(session: Session) -> None:
    """Looks only at jobs that changed since the last pass or were stale then (or when
    the cycle began): any other job was found not stale and nothing about it moved."""
    state = session.state
    watch = state.stale_watch | session.stale_at_open
    state.stale_watch = set()  # what changes from here on is the next pass's
    for key in sorted(watch):
        job = state.jobs.get(key)
        if job is None:
            continue
        if not is_stale(session, job):
            job.stale_since = None
            continue
        state.stale_watch.add(key)  # still stale: look again next time
        if job.stale_since is None:
            job.stale_since = session.now
        grace = grace_of(session, job)
        if grace < 0 or session.now - job.stale_since < grace:
            continue
        stmt = state.statement()
        for pod in state.job_pods(job):
            if pod.status in ACTIVE_ALLOCATED:
                stmt.evict(pod, "gang below its minimum for longer than its grace period", ACTION)
        stmt.commit()
