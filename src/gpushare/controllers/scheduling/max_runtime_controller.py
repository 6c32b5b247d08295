"""The max-runtime controller: stops jobs that run past their maximum runtime
(``max_runtime.py`` says what that is and decides; this module reads the clock and writes).

For each job it stops, in this order:

1. the PodGroup annotation ``gpushare.io/max-runtime-exceeded`` (policy, when, the run
   stopped, and for ``requeue`` the time from which it may be placed again): the
   scheduler reads it as the job's ``not_before`` and holds the job back, so the pods its
   owner makes again wait;
2. the PodGroup condition ``Requeued`` (or ``Failed`` for policy ``fail``), reason
   ``MaxRuntimeExceeded``, and a Warning Event of that reason on the PodGroup;
3. on each placed pod: a Warning Event ``MaxRuntimeExceeded``, the ``DisruptionTarget``
   condition (reason ``MaxRuntimeExceeded``), then its deletion, which its node agent
   carries out by stopping it.

Once a requeue delay is over, ``Requeued`` turns ``False`` (reason ``RequeueDelayOver``).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any

from gpushare.api.contracts import (
    EXPECTED_RUNTIME_ANNOTATION,
    MAX_RUNTIME_EXCEEDED_ANNOTATION,
    PODGROUP_ANNOTATION,
)
from gpushare.api.objects import Obj, metadata
from gpushare.api.timefmt import parse_rfc3339, rfc3339
from gpushare.controllers.events import EventRecorder
from gpushare.controllers.scheduling.max_runtime import (
    FAIL,
    REASON,
    Exceeded,
    JobRun,
    QueueLimit,
    Stop,
    decide,
    encode,
    exceeded_of,
    message,
    queue_limit,
    run_limit,
    running_since,
)
from gpushare.controllers.scheduling.podgroup_conditions import write_condition
from gpushare.controllers.scheduling.scheduling_status import condition_of
from gpushare.controllers.scheduling.translate import TranslateError, expected_runtime
from gpushare.kube.client import PODGROUPS, PODS, QUEUES, ApiError, KubeClient, Stopper
from gpushare.kube.informers import InformerFactory

log = logging.getLogger(__name__)

#: The longest the controller sleeps between passes when nothing falls due sooner.
PERIOD = 5.0
#: The shortest time between two passes (each reads every PodGroup, and their pods).
MIN_INTERVAL = 0.2
REQUEUED, FAILED = "Requeued", "Failed"


def placed_at(pod: Obj) -> float | None:
    """When a placed pod was bound (its ``PodScheduled=True`` transition); None when it
    is not placed: not bound, being deleted, or finished."""
    meta = metadata(pod)
    phase = (pod.get("status") or {}).get("phase") or "Pending"
    if (not (pod.get("spec") or {}).get("nodeName") or meta.get("deletionTimestamp")
            or phase in ("Succeeded", "Failed")):
        return None
    scheduled = condition_of(pod)
    stamp = (scheduled or {}).get("lastTransitionTime") if (
        scheduled or {}).get("status") == "True" else None
    stamp = stamp or meta.get("creationTimestamp")
    try:
        return parse_rfc3339(str(stamp)) if stamp else None
    except ValueError:
        return None


def _key(obj: Obj) -> str:
    meta = metadata(obj)
    return f"{meta.get('namespace')}/{meta.get('name')}"


class MaxRuntimeController:
    name = "max-runtime"

    def __init__(self, client: KubeClient, informers: InformerFactory, stopper: Stopper,
                 events: EventRecorder) -> None:
        self.client = client
        self.stopper = stopper
        self.events = events
        self.podgroups = informers.get(PODGROUPS)
        self.pods = informers.get(PODS)
        self.queues = informers.get(QUEUES)
        self._wake = threading.Event()
        #: Marks written by this process, by job key (the cache may not show them yet).
        self._written: dict[str, Exceeded] = {}
        self._bad_queues: dict[str, str] = {}  # queue -> the error last logged
        #: Per job placed with a limit: (its running since, the smallest limit seen since).
        self._run_limits: dict[str, tuple[float, float]] = {}
        self._queue_limits = False  # whether any queue had a limit at the last pass
        #: PodGroups that declare a runtime or carry a mark, kept by the informer's handler:
        #: with no queue limit, a pass looks at these alone, not at every PodGroup.
        self._declared: set[str] = set()
        self.podgroups.add_handler(self._on_podgroup)
        self.queues.add_handler(lambda *_: self._wake.set())
        self.pods.add_handler(self._on_pod)

    def _on_podgroup(self, kind: str, pg: Obj, _old: Obj | None) -> None:
        key = _key(pg)
        annotations = metadata(pg).get("annotations") or {}
        if kind != "DELETED" and (EXPECTED_RUNTIME_ANNOTATION in annotations
                                  or MAX_RUNTIME_EXCEEDED_ANNOTATION in annotations):
            self._declared.add(key)
        else:
            self._declared.discard(key)
        self._wake.set()

    def _on_pod(self, _kind: str, _pod: Obj, _old: Obj | None) -> None:
        # a pod's change matters only to a job that has, or may get, a limit
        if self._declared or self._run_limits or self._written or self._queue_limits:
            self._wake.set()

    def start(self) -> list[threading.Thread]:
        thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        thread.start()
        return [thread]

    def _run(self) -> None:
        for informer in (self.podgroups, self.pods, self.queues):
            while not informer.wait_synced(0.5):
                if self.stopper.stopped:
                    return
        while not self.stopper.stopped:
            self._wake.clear()
            try:
                due = self.sync(time.time())
            except Exception:
                log.exception("max-runtime pass failed")
                due = None
            wait = PERIOD if due is None else min(PERIOD, max(0.0, due - time.time()))
            self._wake.wait(wait)
            # Changes that come in a burst are looked at together, in one pass.
            self.stopper.wait(MIN_INTERVAL)

    # -- one pass --------------------------------------------------------------------

    def sync(self, now: float) -> float | None:
        """Stop what ran past its limit at ``now``; the next time something falls due."""
        runs, pods = self.runs()
        decision = decide(runs, now)
        for stop in decision.stops:
            self._stop(stop, pods.get(stop.key, []))
        for key in decision.released:
            self._release(key)
        return decision.next_due

    def _limits(self) -> dict[str, QueueLimit]:
        out: dict[str, QueueLimit] = {}
        for queue in self.queues.items():
            name = str(metadata(queue).get("name"))
            try:
                out[name] = queue_limit(queue)
            except TranslateError as error:
                if self._bad_queues.get(name) != str(error):
                    self._bad_queues[name] = str(error)
                    log.warning("%s; the queue's jobs get no maximum runtime from it", error)
        return out

    def runs(self) -> tuple[list[JobRun], dict[str, list[Obj]]]:
        """Every PodGroup with a limit or a mark, and the placed pods of each."""
        limits = self._limits()
        self._queue_limits = any(q.seconds is not None for q in limits.values())
        runs: list[JobRun] = []
        wanted: dict[str, tuple[Obj, float | None, QueueLimit, Exceeded | None]] = {}
        for pg in self._podgroups_to_check():
            key = _key(pg)
            queue = limits.get(str((pg.get("spec") or {}).get("queue") or ""), QueueLimit())
            try:
                declared = expected_runtime(pg)
                mark = exceeded_of(pg)
            except TranslateError:
                continue  # the scheduler reports it; nothing to enforce here
            mine = self._written.get(key)
            if mine is not None and (mark is None or mark.at < mine.at):
                mark = mine
            limits_given = [s for s in (declared, queue.seconds) if s is not None]
            limit = min(limits_given) if limits_given else None
            if limit is not None or mark is not None or key in self._run_limits:
                wanted[key] = (pg, limit, queue, mark)
        placed: dict[str, list[Obj]] = {}
        times: dict[str, list[float]] = {}
        if wanted:
            for pod in self.pods.items():
                meta = metadata(pod)
                group = (meta.get("annotations") or {}).get(PODGROUP_ANNOTATION)
                key = f"{meta.get('namespace')}/{group}"
                if not group or key not in wanted:
                    continue
                at = placed_at(pod)
                if at is not None:
                    placed.setdefault(key, []).append(pod)
                    times.setdefault(key, []).append(at)
        seen: dict[str, tuple[float, float]] = {}
        for key, (pg, limit, queue, mark) in sorted(wanted.items()):
            since = running_since(_min_member(pg), times.get(key, ()))
            limit = self._run_limit(key, since, limit, seen)
            runs.append(JobRun(key, limit, queue.policy, queue.requeue_delay, since, mark))
        self._run_limits = seen
        for gone in [k for k in self._written if k not in wanted]:
            del self._written[gone]
        return runs, placed

    def _podgroups_to_check(self) -> list[Obj]:
        """Every PodGroup when a queue has a limit; else those that declare a runtime, carry
        a mark, or had a limit at the last pass (the informer's handler keeps them)."""
        if self._queue_limits:
            return self.podgroups.items()
        keys = set(self._declared) | set(self._run_limits) | set(self._written)
        return [pg for key in sorted(keys) if (pg := self.podgroups.get(key)) is not None]

    def _run_limit(self, key: str, since: float | None, limit: float | None,
                   seen: dict[str, tuple[float, float]]) -> float | None:
        """The smallest limit the job has had during its current run: raising or removing
        its ``expected-runtime`` once placed (after backfill trusted it) does not lengthen
        the run."""
        limit = run_limit(self._run_limits.get(key), since, limit)
        if since is not None and limit is not None:
            seen[key] = (since, limit)
        return limit

    # -- acting ----------------------------------------------------------------------

    def _stop(self, stop: Stop, pods: list[Obj]) -> None:
        namespace, _, name = stop.key.partition("/")
        try:
            self.client.merge_patch(PODGROUPS.item(name, namespace), {"metadata": {
                "annotations": {MAX_RUNTIME_EXCEEDED_ANNOTATION: encode(stop.mark)}}})
        except ApiError as error:
            if error.not_found:
                return
            raise
        self._written[stop.key] = stop.mark
        text = message(stop)
        kind = FAILED if stop.mark.policy == FAIL else REQUEUED
        write_condition(self.client, namespace, name, kind, {
            "type": kind, "status": "True", "reason": REASON, "message": text,
            "lastTransitionTime": rfc3339(stop.mark.at)})
        pg = self.podgroups.get(stop.key)
        if pg is not None:
            self.events.emit(pg, "Warning", REASON, text)
        log.info("podgroup %s: %s", stop.key, text)
        for pod in pods:
            self._evict(pod, stop, text)

    def _evict(self, pod: Obj, stop: Stop, text: str) -> None:
        meta = metadata(pod)
        name, namespace = str(meta.get("name")), str(meta.get("namespace"))
        self.events.emit(pod, "Warning", REASON, f"evicted: its job {text}")
        condition = {"type": "DisruptionTarget", "status": "True", "reason": REASON,
                     "message": f"its job {text}", "lastTransitionTime": rfc3339(stop.mark.at)}
        try:
            self.client.strategic_patch(PODS.item(name, namespace, "status"),
                                        {"status": {"conditions": [condition]}})
            self.client.delete(PODS.item(name, namespace), propagation="Background")
        except ApiError as error:
            if not error.not_found:
                log.warning("evicting %s/%s failed: %s", namespace, name, error)

    def _release(self, key: str) -> None:
        pg = self.podgroups.get(key)
        current = next((c for c in ((pg or {}).get("status") or {}).get("conditions") or ()
                        if isinstance(c, dict) and c.get("type") == REQUEUED), None)
        if pg is None or current is None or current.get("status") != "True":
            return
        try:
            mark = exceeded_of(pg)
        except TranslateError:
            mark = None
        since = mark.not_before if mark is not None and math.isfinite(mark.not_before) \
            else time.time()
        namespace, _, name = key.partition("/")
        write_condition(self.client, namespace, name, REQUEUED, {
            "type": REQUEUED, "status": "False", "reason": "RequeueDelayOver",
            "message": f"{current.get('message')}; the delay is over since {rfc3339(since)}",
            "lastTransitionTime": rfc3339(since)})


def _min_member(pg: Obj) -> int:
    value: Any = (pg.get("spec") or {}).get("minMember")
    try:
        return int(value) if value is not None else 1
    except (TypeError, ValueError):
        return 1
