"""Maximum runtime: which jobs ran past theirs, what becomes of them, and when to look again.

A job's maximum runtime is the smaller of

* its PodGroup's ``gpushare.io/expected-runtime`` annotation (a duration): the runtime it
  declares, which backfill trusts to start it on nodes reserved for a waiting gang, and
  which is therefore enforced (as a batch system's time limit is both its backfill
  estimate and its kill limit), and
* its queue's ``spec.maxRuntime.seconds``.

It counts from the job's **running since**: the moment its gang was placed, i.e. when the
``max(minMember, 1)``-th of its placed pods was bound (the pods' ``PodScheduled=True``
transition time; placed: bound to a node, not being deleted, not finished). That is when
the PodGroup turns ``Running``, and from then on its queue is charged for the GPUs.
A job that runs past it is stopped by its queue's ``spec.maxRuntime.policy``:

* ``requeue`` (the default): its pods are evicted; the PodGroup is held back, so neither
  its pods' replacements (a Job or Deployment owner creates them) nor the pods still
  pending are placed before ``requeueDelaySeconds`` (default 60) have passed;
* ``fail``: its pods are evicted and the PodGroup ends ``Failed``; it is never placed
  again.

Here: the PodGroup annotation that records it (``gpushare.io/max-runtime-exceeded``, read
by the scheduler as the job's ``not_before``), the queue's policy parsed, and the pure
decision `decide` (no clock, no I/O). The controller acting on it is
``max_runtime_controller.py``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpushare.api.contracts import MAX_RUNTIME_EXCEEDED_ANNOTATION
from gpushare.api.objects import Obj, metadata
from gpushare.api.timefmt import parse_rfc3339, rfc3339
from gpushare.controllers.scheduling.translate import TranslateError

REQUEUE, FAIL = "requeue", "fail"
POLICIES = (REQUEUE, FAIL)
DEFAULT_REQUEUE_DELAY = 60.0
#: The reason of the Events, conditions and pods' ``DisruptionTarget``.
REASON = "MaxRuntimeExceeded"


@dataclass(frozen=True, slots=True)
class QueueLimit:
    """A queue's ``spec.maxRuntime``."""

    seconds: float | None = None
    policy: str = REQUEUE
    requeue_delay: float = DEFAULT_REQUEUE_DELAY


def queue_limit(queue: Obj) -> QueueLimit:
    """A Queue's ``spec.maxRuntime`` (absent: no limit, requeue after 60 s for jobs that
    declare their own); TranslateError naming the field when it is malformed."""
    name = metadata(queue).get("name")
    raw = (queue.get("spec") or {}).get("maxRuntime")
    if raw is None:
        return QueueLimit()
    where = f"queue {name}: spec.maxRuntime"
    if not isinstance(raw, dict):
        raise TranslateError(f"{where}: expected an object with seconds, policy, "
                             "requeueDelaySeconds")
    seconds = _seconds(raw.get("seconds"), f"{where}.seconds", minimum=1)
    delay = _seconds(raw.get("requeueDelaySeconds"), f"{where}.requeueDelaySeconds",
                     minimum=0)
    policy = raw.get("policy", REQUEUE)
    if policy not in POLICIES:
        raise TranslateError(f"{where}.policy: {policy!r} is not one of "
                             f"{', '.join(POLICIES)}")
    return QueueLimit(seconds, str(policy),
                      DEFAULT_REQUEUE_DELAY if delay is None else delay)


def _seconds(value: Any, where: str, minimum: int) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TranslateError(f"{where}: must be a whole number of seconds, got {value!r}")
    if value < minimum:
        raise TranslateError(f"{where}: must be at least {minimum}, got {value}")
    return float(value)


@dataclass(frozen=True, slots=True)
class Exceeded:
    """What the PodGroup annotation records: a run stopped for running past its limit."""

    policy: str
    at: float  # when it was stopped
    running_since: float  # the run that was stopped
    not_before: float  # when it may be placed again (inf: never)


def encode(mark: Exceeded) -> str:
    out: dict[str, Any] = {"policy": mark.policy, "at": rfc3339(mark.at),
                           "runningSince": rfc3339(mark.running_since)}
    if mark.policy == REQUEUE:
        out["notBefore"] = rfc3339(mark.not_before)
    return json.dumps(out, separators=(",", ":"))


def exceeded_of(pg: Obj) -> Exceeded | None:
    """The mark a PodGroup carries (None: none); TranslateError naming the annotation when
    it cannot be read."""
    meta = metadata(pg)
    text = (meta.get("annotations") or {}).get(MAX_RUNTIME_EXCEEDED_ANNOTATION)
    if not text:
        return None
    where = (f"podgroup {meta.get('namespace')}/{meta.get('name')}: annotation "
             f"{MAX_RUNTIME_EXCEEDED_ANNOTATION}")
    try:
        raw = json.loads(text)
        policy = raw["policy"]
        at = parse_rfc3339(str(raw["at"]))
        since = parse_rfc3339(str(raw["runningSince"]))
        if policy == REQUEUE:
            not_before = parse_rfc3339(str(raw["notBefore"]))
        elif policy == FAIL:
            not_before = math.inf
        else:
            raise ValueError(f"policy {policy!r} is not one of {', '.join(POLICIES)}")
    except (ValueError, TypeError, KeyError) as error:
        raise TranslateError(f"{where}: expected {{\"policy\", \"at\", \"runningSince\", "
                             f"\"notBefore\"}} ({error})") from None
    return Exceeded(str(policy), at, since, not_before)


def not_before(pg: Obj) -> float | None:
    """The scheduler's input: the time before which the job may not be placed
    (``math.inf``: never), None when it is not held back."""
    mark = exceeded_of(pg)
    return None if mark is None else mark.not_before


# ---------------------------------------------------------------------- running since


def running_since(min_member: int, placed_at: Iterable[float]) -> float | None:
    """When the gang was placed: the ``max(min_member, 1)``-th earliest placing time of
    its placed pods; None while fewer are placed."""
    times = sorted(placed_at)
    need = max(min_member, 1)
    return times[need - 1] if len(times) >= need else None


def run_limit(before: tuple[float, float] | None, since: float | None,
              limit: float | None) -> float | None:
    """The limit of a run: the smallest the job has declared since its gang was placed.
    ``before``: the (running since, limit) last seen; a limit raised or removed during a
    run (after backfill trusted it) does not lengthen that run; a new run takes the limit
    as it stands."""
    if since is None or before is None or before[0] != since:
        return limit
    return before[1] if limit is None else min(limit, before[1])


# ------------------------------------------------------------------------ the decision


@dataclass(frozen=True, slots=True)
class JobRun:
    """One PodGroup as the decision sees it."""

    key: str
    limit: float | None  # seconds; None: none
    policy: str
    requeue_delay: float
    running_since: float | None  # None: its gang is not placed
    mark: Exceeded | None = None  # what it carries from an earlier stop


@dataclass(frozen=True, slots=True)
class Stop:
    """A job to stop now, and the mark to write on it."""

    key: str
    limit: float
    ran: float  # seconds it had run when found
    mark: Exceeded


@dataclass(frozen=True, slots=True)
class Decision:
    stops: list[Stop]
    #: Requeued jobs whose delay is over and whose condition should say so.
    released: list[str]
    #: The next time something falls due (a limit reached, a delay over); None: nothing.
    next_due: float | None


def decide(runs: Iterable[JobRun], now: float) -> Decision:
    """Which jobs ran past their maximum runtime at ``now`` and what becomes of each; which
    requeue delays are over; and when to look again.

    A run is stopped once: a job whose mark names its current run (the pods are still
    going) is not stopped again. A requeued job may be placed from ``ceil(now + delay)``
    (whole seconds, as the mark is written: never earlier than the delay)."""
    stops: list[Stop] = []
    released: list[str] = []
    due: list[float] = []
    for run in runs:
        mark = run.mark
        if mark is not None and mark.policy == REQUEUE and math.isfinite(mark.not_before):
            if now >= mark.not_before:
                released.append(run.key)
            else:
                due.append(mark.not_before)
        if run.limit is None or run.running_since is None:
            continue
        if mark is not None and (mark.policy == FAIL
                                 or run.running_since <= mark.running_since):
            continue  # already stopped: this run, or the job failed
        ends = run.running_since + run.limit
        if now < ends:
            due.append(ends)
            continue
        until = math.ceil(now + run.requeue_delay) if run.policy == REQUEUE else math.inf
        stops.append(Stop(run.key, run.limit, now - run.running_since,
                          Exceeded(run.policy, now, run.running_since, until)))
    return Decision(sorted(stops, key=lambda s: s.key), sorted(released),
                    min(due) if due else None)


def message(stop: Stop) -> str:
    """What the Events and conditions say about a stopped job."""
    text = (f"ran {stop.ran:.0f}s since its gang was placed, past its maximum runtime of "
            f"{stop.limit:g}s")
    if stop.mark.policy == FAIL:
        return f"{text}: its pods are evicted and it failed"
    return (f"{text}: its pods are evicted and it is requeued; it may be scheduled again "
            f"from {rfc3339(stop.mark.not_before)}")
