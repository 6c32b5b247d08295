"""The CronJob controller, as kube-controller-manager's: a Job per scheduled time.

At each time ``spec.schedule`` names (standard cron syntax and the ``@hourly``-style
macros, read by ``croniter``, in ``spec.timeZone`` or UTC) the controller creates the Job
``<cronjob>-<minutes since the epoch>`` from ``spec.jobTemplate``, owned by the CronJob
and annotated ``batch.kubernetes.io/cronjob-scheduled-timestamp``. Only the most recent
missed time runs (after a restart, say), and not when it is more than
``startingDeadlineSeconds`` late. ``concurrencyPolicy``: ``Allow`` runs Jobs side by side,
``Forbid`` skips a time while a Job is active, ``Replace`` deletes the active Jobs first.
``suspend: true`` starts nothing. Finished Jobs beyond ``successfulJobsHistoryLimit``
(default 3) and ``failedJobsHistoryLimit`` (default 1) are deleted, oldest first, with
their pods. ``status.active``, ``lastScheduleTime`` and ``lastSuccessfulTime`` say what
happened. The planning is pure (``plan_cronjob``, given the clock's reading).
"""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter

from gpushare.api.objects import Meta, Obj
from gpushare.api.timefmt import parse_rfc3339, rfc3339
from gpushare.controllers.events import EventRecorder
from gpushare.controllers.workloads.replicas import owner_reference
from gpushare.controllers.workloads.workload_controllers import _OwnerController
from gpushare.kube.client import CRONJOBS, JOBS, ApiError, KubeClient, Stopper
from gpushare.kube.informers import InformerFactory

log = logging.getLogger(__name__)

SCHEDULED_ANNOTATION = "batch.kubernetes.io/cronjob-scheduled-timestamp"
#: How soon a CronJob whose schedule cannot be read is looked at again (it is also
#: looked at whenever it changes).
BAD_SCHEDULE_RETRY = 60.0




def _spec(obj: Obj) -> Obj:
    spec = obj.get("spec")
    return spec if isinstance(spec, dict) else {}


def finished(job: Obj) -> str | None:
    """``Complete`` or ``Failed`` for a finished Job, else None."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("status") == "True" and cond.get("type") in (
                "Complete", "Failed"):
            return str(cond["type"])
    return None


def _zone(cronjob: Obj) -> tzinfo:
    name = _spec(cronjob).get("timeZone")
    if not name:
        return UTC
    try:
        return ZoneInfo(str(name))
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise ValueError(f"spec.timeZone: unknown time zone {name!r}") from e


def schedule_times(cronjob: Obj, since: float, now: float) -> tuple[float | None, float]:
    """(the latest scheduled time in (since, now], or None; the next one after now)."""
    schedule = str(_spec(cronjob).get("schedule") or "")
    zone = _zone(cronjob)
    try:
        here = datetime.fromtimestamp(now, zone)
        latest = croniter(schedule, here).get_prev(datetime).timestamp()
        upcoming = croniter(schedule, here).get_next(datetime).timestamp()
    except (CroniterError, ValueError, KeyError) as e:
        raise ValueError(f"spec.schedule: unparseable schedule {schedule!r}: {e}") from e
    return (latest if latest > since else None), upcoming


@dataclass
class CronPlan:
    create: Obj | None = None
    delete: list[str] = field(default_factory=list)
    status: Obj | None = None
    requeue_after: float | None = None
    events: list[tuple[str, str, str]] = field(default_factory=list)


def job_for(cronjob: Obj, scheduled: float) -> Obj:
    """The Job of the run scheduled at `scheduled` (epoch seconds)."""
    meta = Meta.of(cronjob)
    template = copy.deepcopy(_spec(cronjob).get("jobTemplate") or {})
    tmeta = Meta.of(template)
    annotations = dict(tmeta.annotations)
    annotations[SCHEDULED_ANNOTATION] = rfc3339(scheduled)
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"{meta.name}-{int(scheduled // 60)}",
                         "namespace": meta.namespace or "default",
                         "labels": dict(tmeta.labels),
                         "annotations": annotations,
                         "ownerReferences": [owner_reference(cronjob, "batch/v1", "CronJob")]},
            "spec": template.get("spec") or {}}


def _created_at(job: Obj) -> float:
    for text in (Meta.of(job).annotations.get(SCHEDULED_ANNOTATION),
                 Meta.of(job).creation_timestamp):
        if isinstance(text, str):
            try:
                return parse_rfc3339(text)
            except ValueError:
                continue
    return 0.0


def _reference(job: Obj) -> Obj:
    m = Meta.of(job)
    return {"apiVersion": "batch/v1", "kind": "Job", "name": m.name,
            "namespace": m.namespace, "uid": m.uid}


def plan_cronjob(cronjob: Obj, jobs: list[Obj], now: float) -> CronPlan:
    """What the CronJob needs at `now` (epoch seconds), given the Jobs it owns."""
    plan = CronPlan()
    spec, status = _spec(cronjob), dict(cronjob.get("status") or {})
    live = [j for j in jobs if not Meta.of(j).deleting]
    active = [j for j in live if finished(j) is None]
    last = status.get("lastScheduleTime") or Meta.of(cronjob).creation_timestamp
    since = parse_rfc3339(last) if isinstance(last, str) else now
    try:
        latest, upcoming = schedule_times(cronjob, since, now)
    except ValueError as e:
        plan.events.append(("Warning", "InvalidSchedule", str(e)))
        plan.requeue_after = BAD_SCHEDULE_RETRY
        return plan
    plan.requeue_after = max(upcoming - now, 0.0) + 0.1
    names = {Meta.of(j).name for j in jobs}
    deadline = spec.get("startingDeadlineSeconds")
    if latest is not None and not spec.get("suspend"):
        late = isinstance(deadline, int) and now - latest > deadline
        job = job_for(cronjob, latest)
        policy = spec.get("concurrencyPolicy") or "Allow"
        if late:
            plan.events.append(("Warning", "MissSchedule",
                                f"Missed scheduled time to start a job: {rfc3339(latest)}"))
        elif Meta.of(job).name in names:
            pass  # this run exists already
        elif policy == "Forbid" and active:
            plan.events.append(("Normal", "JobAlreadyActive",
                                "Not starting job because prior execution is running and "
                                "concurrency policy is Forbid"))
            latest = None  # not taken: tried again when the active Job ends
        else:
            if policy == "Replace":
                plan.delete.extend(Meta.of(j).name for j in active)
                active = []
            plan.create = job
        if latest is not None:
            status["lastScheduleTime"] = rfc3339(latest)
    plan.delete.extend(_over_history(spec, live))
    refs = [_reference(j) for j in active if Meta.of(j).name not in plan.delete]
    successes = [j for j in live if finished(j) == "Complete"]
    if successes:
        done = max(((j.get("status") or {}).get("completionTime") or "") for j in successes)
        if done:
            status["lastSuccessfulTime"] = done
    if refs:
        status["active"] = sorted(refs, key=lambda r: str(r["name"]))
    else:
        status.pop("active", None)
    if status != (cronjob.get("status") or {}):
        plan.status = status
    return plan


def _over_history(spec: Obj, live: list[Obj]) -> list[str]:
    out: list[str] = []
    for outcome, key, default in (("Complete", "successfulJobsHistoryLimit", 3),
                                  ("Failed", "failedJobsHistoryLimit", 1)):
        limit = spec.get(key)
        keep = int(limit) if isinstance(limit, int) and limit >= 0 else default
        done = sorted((j for j in live if finished(j) == outcome), key=_created_at)
        out.extend(Meta.of(j).name for j in done[: max(len(done) - keep, 0)])
    return out


class CronJobController(_OwnerController):
    name = "cronjob-controller"
    owner_kind = "CronJob"

    def __init__(self, client: KubeClient, informers: InformerFactory, stopper: Stopper,
                 events: EventRecorder, clock: Any = None) -> None:
        super().__init__(client, informers, stopper, events, CRONJOBS, JOBS)
        self.clock = clock or time.time

    def reconcile(self, key: str) -> None:
        cronjob = self.owners.get(key)
        if cronjob is None or Meta.of(cronjob).deleting:
            return
        meta = Meta.of(cronjob)
        uid, namespace = meta.uid, meta.namespace or "default"
        plan = plan_cronjob(cronjob, self.index.of(uid), self.clock())
        for event_type, reason, message in plan.events:
            self.events.emit(cronjob, event_type, reason, message)
        for name in plan.delete:
            try:
                self.client.delete(JOBS.item(name, namespace), propagation="Background")
            except ApiError as error:
                if error.status != 404:
                    raise
            self.events.emit(cronjob, "Normal", "SuccessfulDelete", f"Deleted job {name}")
        if plan.create is not None:
            name = Meta.of(plan.create).name
            try:
                created = self.client.create(JOBS.collection(namespace), plan.create)
            except ApiError as error:
                if error.status != 409:
                    self.events.emit(cronjob, "Warning", "FailedCreate",
                                     f"Error creating job: {error}")
                    raise
            else:
                self.index.created(uid, created)
                self.events.emit(cronjob, "Normal", "SuccessfulCreate", f"Created job {name}")
                if plan.status is not None:
                    plan.status["active"] = sorted(
                        [*plan.status.get("active", []), _reference(created)],
                        key=lambda r: str(r["name"]))
        if plan.status is not None:
            try:
                self.client.merge_patch(CRONJOBS.item(meta.name, namespace, "status"),
                                        {"status": {**plan.status,
                                                    "active": plan.status.get("active")}})
            except ApiError as error:
                if error.status != 404:
                    raise
        if plan.requeue_after is not None:
            self.queue.add_after(key, plan.requeue_after)
