"""The batch/v1 Job rules, as pure functions: which pods to create, and the Job's status.

Given a Job, the pods it owns and the time, :func:`plan_job` says which pods to create
or delete and what the status should read. The shell does the API calls.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from gpushare.api.objects import Meta, Obj
from gpushare.api.timefmt import timestamp

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
CONTROLLER_UID_LABELS = ("controller-uid", "batch.kubernetes.io/controller-uid")
JOB_NAME_LABELS = ("job-name", "batch.kubernetes.io/job-name")
DEFAULT_BACKOFF_LIMIT = 6


@dataclass(slots=True)
class JobPlan:
    create: list[Obj] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)  # pod names
    status: Obj | None = None  # the new status, or None when unchanged
    #: Pods are owed but held back by the failure back-off: look again in this many seconds.
    requeue_after: float | None = None


BACKOFF_BASE_SECONDS = 10.0  # kube-controller-manager's: 10 s, 20 s, 40 s, ...
BACKOFF_MAX_SECONDS = 360.0  # ... capped at 6 minutes


def backoff_seconds(failures: int) -> float:
    """The delay before the pod that replaces the ``failures``-th failed one."""
    if failures <= 0:
        return 0.0
    return min(BACKOFF_BASE_SECONDS * 2 ** min(failures - 1, 16), BACKOFF_MAX_SECONDS)


def _finished_at(pod: Obj) -> float | None:
    """When a failed pod finished: its last container's end, else its Ready change."""
    status = pod.get("status") or {}
    stamps: list[float] = []
    for container in status.get("containerStatuses") or ():
        terminated = ((container or {}).get("state") or {}).get("terminated") or {}
        if terminated.get("finishedAt"):
            stamps.append(timestamp(terminated["finishedAt"]))
    if not stamps:
        for condition in status.get("conditions") or ():
            if (condition or {}).get("lastTransitionTime"):
                stamps.append(timestamp(condition["lastTransitionTime"]))
    found = [t for t in stamps if t > 0]
    return max(found) if found else None


def _phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase", "Pending"))


def _terminating(pod: Obj) -> bool:
    return Meta.of(pod).deleting


def _index_of(pod: Obj) -> int | None:
    meta = Meta.of(pod)
    text = meta.annotations.get(COMPLETION_INDEX) or meta.labels.get(COMPLETION_INDEX)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _condition(kind: str, reason: str, message: str, now: str) -> Obj:
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastProbeTime": now,
        "lastTransitionTime": now,
    }


def finished_condition(job: Obj) -> str | None:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return str(cond["type"])
    return None


def pod_for(job: Obj, name: str, index: int | None) -> Obj:
    """A pod from the Job's template, owned by the Job."""
    meta = Meta.of(job)
    spec = job.get("spec") or {}
    template = copy.deepcopy(spec.get("template") or {})
    tmeta = Meta.of(template)
    labels = dict(tmeta.labels)
    annotations = dict(tmeta.annotations)
    for key in CONTROLLER_UID_LABELS:
        labels[key] = meta.uid
    for key in JOB_NAME_LABELS:
        labels[key] = meta.name
    pod_spec = template.get("spec") or {}
    if index is not None:
        labels[COMPLETION_INDEX] = str(index)
        annotations[COMPLETION_INDEX] = str(index)
        for container in pod_spec.get("containers") or []:
            env = [e for e in container.get("env") or [] if e.get("name") != "JOB_COMPLETION_INDEX"]
            env.append({"name": "JOB_COMPLETION_INDEX", "value": str(index)})
            container["env"] = env
    pod_spec.setdefault("restartPolicy", "Never")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": meta.namespace or "default",
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": meta.name,
                    "uid": meta.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": pod_spec,
    }


@dataclass(frozen=True, slots=True)
class _JobSpec:
    """What a Job's spec asks, with Kubernetes' defaults."""

    name: str
    indexed: bool
    parallelism: int
    completions: int | None
    backoff_limit: int
    suspended: bool

    @classmethod
    def of(cls, job: Obj) -> _JobSpec:
        spec = job.get("spec") or {}
        parallelism = spec.get("parallelism")
        completions = spec.get("completions")
        backoff = spec.get("backoffLimit")
        return cls(
            name=Meta.of(job).name,
            indexed=spec.get("completionMode") == "Indexed",
            parallelism=int(parallelism if parallelism is not None else 1),
            completions=int(completions) if completions is not None else None,
            backoff_limit=int(backoff) if backoff is not None else DEFAULT_BACKOFF_LIMIT,
            suspended=bool(spec.get("suspend")),
        )


@dataclass(frozen=True, slots=True)
class _JobPods:
    """The Job's pods by phase, and the counts its status keeps."""

    active: list[Obj]
    failed_pods: list[Obj]
    succeeded: int
    failed: int
    ready: int
    succeeded_indexes: set[int]

    @classmethod
    def of(cls, pods: list[Obj], status: Obj) -> _JobPods:
        active = [p for p in pods
                  if _phase(p) not in ("Succeeded", "Failed") and not _terminating(p)]
        succeeded_pods = [p for p in pods if _phase(p) == "Succeeded"]
        failed_pods = [p for p in pods if _phase(p) == "Failed"]
        return cls(
            active=active,
            failed_pods=failed_pods,
            succeeded=max(len(succeeded_pods), int(status.get("succeeded") or 0)),
            failed=max(len(failed_pods), int(status.get("failed") or 0)),
            ready=sum(1 for p in active if _pod_ready(p)),
            succeeded_indexes={i for p in succeeded_pods if (i := _index_of(p)) is not None},
        )


def plan_job(
    job: Obj, pods: list[Obj], now: str, new_suffix: Any, now_epoch: float | None = None
) -> JobPlan:
    """What to do for one Job.

    With ``now_epoch`` (seconds), a pod that replaces failed ones waits
    ``backoff_seconds(failures)`` after the last failure, as kube-controller-manager's
    Job controller does.

    ``pods`` are the pods the Job controls, including those created but not yet seen by
    the watch (the shell remembers them), so a lagging cache never doubles a Job's pods;
    ``new_suffix()`` returns a fresh random name suffix.
    """
    plan = JobPlan()
    spec = _JobSpec.of(job)
    status = job.get("status") or {}
    counts = _JobPods.of(pods, status)
    new_status: Obj = copy.deepcopy(status)
    new_status.setdefault("startTime", now)
    finished = _conclude(job, spec, counts, new_status, now)

    if finished is not None or spec.suspended:
        plan.delete = [Meta.of(p).name for p in counts.active]
        active_count = 0
    else:
        missing = _missing_pods(spec, counts)
        if missing > 0 and now_epoch is not None:
            wait = _backoff_wait(counts, now_epoch)
            if wait is not None:
                plan.requeue_after = wait
                missing = 0
        if missing > 0:
            plan.create = _new_pods(job, spec, counts, missing, new_suffix)
        active_count = len(counts.active) + len(plan.create)

    new_status["active"] = active_count
    new_status["succeeded"] = counts.succeeded
    new_status["failed"] = counts.failed
    new_status["ready"] = counts.ready if finished is None else 0
    if spec.indexed:
        new_status["completedIndexes"] = _ranges(sorted(counts.succeeded_indexes))
    new_status = {k: v for k, v in new_status.items() if v not in (None, "")}
    if new_status != status:
        plan.status = new_status
    return plan


def _conclude(job: Obj, spec: _JobSpec, counts: _JobPods, new_status: Obj,
              now: str) -> str | None:
    """The Job's finished condition ("Complete", "Failed") or None; a Job that finishes
    now gets its condition (and completion time) in ``new_status``."""
    finished = finished_condition(job)
    if finished is not None:
        return finished
    conditions = list(new_status.get("conditions") or [])
    if counts.failed > spec.backoff_limit:
        conditions.append(_condition("Failed", "BackoffLimitExceeded",
                                     "Job has reached the specified backoff limit", now))
        finished = "Failed"
    elif _complete(spec.indexed, spec.completions, counts.succeeded, counts.succeeded_indexes,
                   counts.active):
        conditions.append(_condition("Complete", "CompletionsReached",
                                     "Reached expected number of succeeded pods", now))
        new_status["completionTime"] = now
        finished = "Complete"
    if conditions:
        new_status["conditions"] = conditions
    return finished


def _missing_pods(spec: _JobSpec, counts: _JobPods) -> int:
    """How many more pods should run now (negative: more run than wanted)."""
    if spec.completions is None:
        want = spec.parallelism if counts.succeeded == 0 else 0
    else:
        want = min(spec.parallelism, max(spec.completions - counts.succeeded, 0))
    return want - len(counts.active)


def _backoff_wait(counts: _JobPods, now_epoch: float) -> float | None:
    """Seconds left of the failure back-off before a replacement pod, or None (none due)."""
    if not counts.failed_pods:
        return None
    last = max((t for p in counts.failed_pods if (t := _finished_at(p)) is not None),
               default=None)
    if last is None:
        return None
    wait = last + backoff_seconds(counts.failed) - now_epoch
    return wait if wait > 0 else None


def _new_pods(job: Obj, spec: _JobSpec, counts: _JobPods, missing: int,
              new_suffix: Any) -> list[Obj]:
    """``missing`` new pods; an Indexed Job's take the lowest indexes neither running nor
    done."""
    if spec.indexed and spec.completions is not None:
        busy = {i for p in counts.active if (i := _index_of(p)) is not None}
        taken = busy | counts.succeeded_indexes
        free = [i for i in range(spec.completions) if i not in taken]
        return [pod_for(job, f"{spec.name}-{index}-{new_suffix()}", index)
                for index in free[:missing]]
    return [pod_for(job, f"{spec.name}-{new_suffix()}", None) for _ in range(missing)]


def _pod_ready(pod: Obj) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def _complete(
    indexed: bool,
    completions: int | None,
    succeeded: int,
    succeeded_indexes: set[int],
    active: list[Obj],
) -> bool:
    if completions is None:
        return succeeded > 0 and not active
    if indexed:
        return all(i in succeeded_indexes for i in range(completions))
    return succeeded >= completions


def _ranges(indexes: list[int]) -> str:
    """[0, 1, 2, 5] → ``"0-2,5"``, as ``status.completedIndexes`` writes them."""
    parts: list[str] = []
    start = prev = None
    for i in indexes:
        if start is None:
            start = prev = i
        elif prev is not None and i == prev + 1:
            prev = i
        else:
            parts.append(f"{start}-{prev}" if start != prev else str(start))
            start = prev = i
    if start is not None:
        parts.append(f"{start}-{prev}" if start != prev else str(start))
    return ",".join(parts)
