"""The scheduler core's live state, kept in step with the API by deltas.

Watch events arrive in any order: a pod before its PodGroup, a PodGroup before its
Queue, a bound pod before its Node. The core's state accepts an object only once what it
depends on is there, so the mirror remembers every watched object and applies each one
as soon as it can, and re-applies dependents when a missing piece arrives.

Binds the loop has issued but whose watch event has not arrived yet are *assumed*: the
pod stays on its node with its GPUs in the state whatever older events say, so that no
GPU is booked twice. A failed bind drops the assumption.

Pure bookkeeping: no I/O, no clock (times are passed in).
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from gpushare.api.contracts import DEFAULT_QUEUE, PODGROUP_ANNOTATION, SCHEDULER_NAMES
from gpushare.api.objects import Obj
from gpushare.api.taints import Taint, blocking_taints
from gpushare.api.timefmt import timestamp
from gpushare.controllers.scheduling.max_runtime import not_before
from gpushare.controllers.scheduling.reservations import reservation_of
from gpushare.controllers.scheduling.translate import (
    TranslateError,
    cpu_memory_requests,
    expected_runtime,
    job_from_podgroup,
    node_from_api,
    pod_from_api,
    priority_class_of,
    queue_from_api,
    refuse_gpu_types_under_kai,
    refuse_lending_under_kai,
)
from gpushare.model import Job, PodStatus, Queue
from gpushare.model.pod import ON_NODE
from gpushare.model.quantities import RESOURCES
from gpushare.model.queue import ResourceSpec
from gpushare.scheduler.state import ClusterState, StateError

log = logging.getLogger(__name__)


#: Where the jobs of a deleted (or never created) queue are kept in the core's state: a
#: root of its own, outside every team's tree, with no quota and a limit of zero, so that
#: their running pods still hold their node's GPUs while no parent counts them and nothing
#: new is placed. Not a valid Kubernetes name, so no Queue object can ever clash with it.
#: Bound pods whose PodGroup is unknown are kept there too, each in a job of its own.
ORPHAN_QUEUE = "(deleted queues)"
#: The name of the job that keeps a bound pod without a known PodGroup on its node (after
#: the prefix, the pod's name); not a valid Kubernetes name, so no PodGroup clashes with it.
HOLDER_PREFIX = "(no pod group) "


def _orphan_queue() -> Queue:
    return Queue(
        name=ORPHAN_QUEUE,
        resources={r: ResourceSpec(quota=Fraction(0), limit=Fraction(0),
                                   over_quota_weight=Fraction(0)) for r in RESOURCES},
    )


@dataclass(slots=True)
class Assumed:
    node: str
    gpu_indices: tuple[int, ...]
    portion: int


@dataclass(slots=True)
class JobMemory:
    """What the core learns about a job over time and a PodGroup update must not erase."""

    stale_since: float | None = None
    last_eviction_at: float | None = None


@dataclass(slots=True)
class Mirror:
    state: ClusterState = field(default_factory=ClusterState)
    scheduler_names: tuple[str, ...] = SCHEDULER_NAMES
    #: The scheduler runs with ``compat: kai``: a queue that sets a lending limit is
    #: refused (kept out of the tree, its reason in ``invalid``).
    compat_kai: bool = False
    priorities: dict[str, int] = field(default_factory=dict)
    # PriorityClasses whose preemptionPolicy is Never.
    never_preempt: set[str] = field(default_factory=set)
    raw_nodes: dict[str, Obj] = field(default_factory=dict)
    raw_queues: dict[str, Obj] = field(default_factory=dict)
    raw_podgroups: dict[str, Obj] = field(default_factory=dict)
    raw_pods: dict[str, Obj] = field(default_factory=dict)  # ours, grouped or not
    assumed: dict[str, Assumed] = field(default_factory=dict)
    # Pods the loop has asked to delete: Releasing until the watch shows the deletion,
    # whatever older events say, so their resources are not handed out twice.
    evicting: set[str] = field(default_factory=set)
    # PodGroups whose pods changed since the loop last looked (for their status phase).
    dirty_jobs: set[str] = field(default_factory=set)
    # CPU and memory that pods of other schedulers hold on each node (millicores, bytes):
    # taken off the node's capacity, as KAI does.
    foreign: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)
    _foreign_node: dict[str, str] = field(default_factory=dict)  # pod key -> node
    job_memory: dict[str, JobMemory] = field(default_factory=dict)
    invalid: dict[str, str] = field(default_factory=dict)  # object key -> why unusable
    _pods_by_job: dict[str, set[str]] = field(default_factory=dict)
    _job_of_pod: dict[str, str | None] = field(default_factory=dict)
    # PodGroups by the uid of their owner, and ungrouped pods by the uids that could own
    # their group: a pod can be scheduled before the pod-grouper's annotation lands.
    _pg_by_owner: dict[str, str] = field(default_factory=dict)
    _waiting_by_owner: dict[str, set[str]] = field(default_factory=dict)
    _jobs_by_queue: dict[str, set[str]] = field(default_factory=dict)
    _pods_by_node: dict[str, set[str]] = field(default_factory=dict)
    # Each node's blocking taints, and the distinct sets among them (what pods tolerate).
    _node_taints: dict[str, tuple[Taint, ...]] = field(default_factory=dict)
    _taint_sets: tuple[tuple[Taint, ...], ...] = ()
    _pod_index: dict[str, int] = field(default_factory=dict)
    _counter: itertools.count = field(default_factory=itertools.count)
    _removed_queues: set[str] = field(default_factory=set)
    _orphans: set[str] = field(default_factory=set)  # jobs kept in ORPHAN_QUEUE
    # Jobs whose PodGroup was deleted while pods of theirs were still on nodes.
    _deleted_jobs: set[str] = field(default_factory=set)
    # Bound pods whose PodGroup is unknown (a Job deleted with its PodGroup while its pods
    # still stop, seen by a scheduler started since): pod key -> the job in ORPHAN_QUEUE
    # that keeps what the pod holds on its node until the pod is gone or finished.
    _held: dict[str, str] = field(default_factory=dict)

    # -- priority classes ---------------------------------------------------------------

    def on_priority_class(self, kind: str, obj: Obj) -> None:
        name = str((obj.get("metadata") or {}).get("name", ""))
        self.invalid.pop(f"priorityclass/{name}", None)
        if kind == "DELETED":
            self.priorities.pop(name, None)
            self.never_preempt.discard(name)
        else:
            try:
                value, may_preempt = priority_class_of(obj)
            except TranslateError as error:
                self.invalid[f"priorityclass/{name}"] = str(error)
                return
            self.priorities[name] = value
            if may_preempt:
                self.never_preempt.discard(name)
            else:
                self.never_preempt.add(name)
        for key, pg in self.raw_podgroups.items():
            if (pg.get("spec") or {}).get("priorityClassName") == name:
                self._apply_job(key)

    # -- nodes --------------------------------------------------------------------------

    def on_node(self, kind: str, obj: Obj) -> None:
        name = str((obj.get("metadata") or {}).get("name", ""))
        if kind == "DELETED":
            self.raw_nodes.pop(name, None)
            self.state.remove_node(name)
            self._node_taints.pop(name, None)
            self._refresh_taint_sets()
            return
        self.raw_nodes[name] = obj
        self._node_taints[name] = blocking_taints(obj)
        self._refresh_taint_sets()
        known = name in self.state.nodes
        node = node_from_api(obj)
        held = self.foreign.get(name)
        if held:
            node.cpu_millis = max(node.cpu_millis - sum(c for c, _ in held.values()), 0)
            node.memory_bytes = max(node.memory_bytes - sum(m for _, m in held.values()), 0)
            node.max_pods = max(node.max_pods - len(held), 0)
        old = self.state.nodes.get(name)
        if old is not None and _same_node(old, node):
            return
        self.state.upsert_node(node)
        if not known:
            for pod_key in list(self._pods_by_node.get(name, ())):
                self._apply_pod(pod_key)

    def _refresh_taint_sets(self) -> None:
        """Re-derive the pods' taint terms when the cluster's distinct taint sets change
        (a node of a new kind, a taint added or removed): rare, a few kinds of node."""
        sets = tuple(sorted({t for t in self._node_taints.values() if t}))
        if sets == self._taint_sets:
            return
        self._taint_sets = sets
        for key in list(self.raw_pods):
            if not ((self.raw_pods[key].get("spec") or {}).get("nodeName")):
                self._apply_pod(key)

    # -- queues -------------------------------------------------------------------------

    def on_queue(self, kind: str, obj: Obj) -> None:
        name = str((obj.get("metadata") or {}).get("name", ""))
        if kind == "DELETED":
            self.raw_queues.pop(name, None)
            self.invalid.pop(f"queue/{name}", None)
            # Its jobs move out of the tree: pending pods wait (the reason names the queue),
            # running ones keep their GPUs, and the parent no longer counts any of them.
            for job_key in sorted(self._jobs_by_queue.get(name, ())):
                self._apply_job(job_key)
            self._try_remove_queue(name)
            return
        self.raw_queues[name] = obj
        self._removed_queues.discard(name)
        try:
            queue = queue_from_api(obj)
            if self.compat_kai:
                refuse_lending_under_kai(queue)
                refuse_gpu_types_under_kai(queue)
        except TranslateError as error:
            self.invalid[f"queue/{name}"] = str(error)
            return
        self.invalid.pop(f"queue/{name}", None)
        try:
            self.state.upsert_queue(queue)
        except StateError as error:
            self.invalid[f"queue/{name}"] = str(error)
            return
        for job_key in list(self._jobs_by_queue.get(name, ())):
            existing = self.state.jobs.get(job_key)
            if existing is None or existing.queue == ORPHAN_QUEUE:
                self._apply_job(job_key)
        self._drop_orphan_queue()
        # A parent that was deleted while this child held it up can go now.
        for pending in list(self._removed_queues):
            self._try_remove_queue(pending)

    def _try_remove_queue(self, name: str) -> None:
        queue = self.state.queues.get(name)
        if queue is None:
            self._removed_queues.discard(name)
            return
        try:
            self.state.remove_queue(name)
            self._removed_queues.discard(name)
        except StateError:
            self._removed_queues.add(name)  # still has children or jobs: later

    # -- podgroups ----------------------------------------------------------------------

    def on_podgroup(self, kind: str, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        if kind == "DELETED":
            old = self.raw_podgroups.pop(key, None)
            if old is not None:
                self._unindex_job(key, old)
                for uid in _owner_uids(old):
                    if self._pg_by_owner.get(uid) == key:
                        del self._pg_by_owner[uid]
            if self._on_nodes(key):
                # Deleted with its Job while its pods still stop on their nodes: the job
                # stays until the last of them is gone, so that what they hold is not
                # handed to another pod before (nothing of it is placed meanwhile).
                self._deleted_jobs.add(key)
                return
            self._remove_job(key)
            return
        self._deleted_jobs.discard(key)
        self._on_podgroup_change(key, obj, meta)

    def _on_nodes(self, job_key: str) -> bool:
        """Whether a pod of the job holds resources on a node (bound, not finished)."""
        job = self.state.jobs.get(job_key)
        return job is not None and any(
            self.state.pods[p].status in ON_NODE for p in job.pods if p in self.state.pods)

    def _remove_job(self, key: str) -> None:
        """The job leaves the core's state, with its pods."""
        self._deleted_jobs.discard(key)
        self.state.remove_job(key)
        self._orphans.discard(key)
        self.job_memory.pop(key, None)
        self.invalid.pop(f"podgroup/{key}", None)
        for pending in list(self._removed_queues):
            self._try_remove_queue(pending)
        self._drop_orphan_queue()

    def _on_podgroup_change(self, key: str, obj: Obj, meta: Obj) -> None:
        old = self.raw_podgroups.get(key)
        if old is not None:
            if (old.get("spec") or {}) == (obj.get("spec") or {}) and (
                old.get("metadata") or {}
            ).get("annotations") == meta.get("annotations"):
                self.raw_podgroups[key] = obj
                return  # a status write: nothing the core reads
            self._unindex_job(key, old)
        self.raw_podgroups[key] = obj
        queue = str((obj.get("spec") or {}).get("queue") or DEFAULT_QUEUE)
        self._jobs_by_queue.setdefault(queue, set()).add(key)
        self._apply_job(key)
        self.dirty_jobs.add(key)  # its phase may follow (a max-runtime failure)
        for uid in _owner_uids(obj):
            self._pg_by_owner[uid] = key
            for pod_key in list(self._waiting_by_owner.pop(uid, ())):
                raw = self.raw_pods.get(pod_key)
                if raw is not None and self._job_of_pod.get(pod_key) is None:
                    self._reindex_pod(pod_key, raw)
                    self._apply_pod(pod_key)

    def _unindex_job(self, key: str, pg: Obj) -> None:
        queue = str((pg.get("spec") or {}).get("queue") or DEFAULT_QUEUE)
        jobs = self._jobs_by_queue.get(queue)
        if jobs is not None:
            jobs.discard(key)

    def _apply_job(self, key: str) -> None:
        pg = self.raw_podgroups.get(key)
        if pg is None:
            return
        job = job_from_podgroup(pg, self.priorities, self.never_preempt)
        memory = self.job_memory.setdefault(key, JobMemory())
        job.stale_since = memory.stale_since
        job.last_eviction_at = memory.last_eviction_at
        job.pending_since = memory.last_eviction_at  # pending again since; None: created
        existing = self.state.jobs.get(key)
        try:
            job.expected_runtime = expected_runtime(pg)
            job.not_before = not_before(pg)
            held = reservation_of(pg)
        except TranslateError as error:
            self.invalid[f"podgroup/{key}"] = str(error)
            self._orphan_job(job, existing)
            return
        if held is not None and existing is None and key not in self.state.reservations:
            # First sight of the job (a restarted scheduler): its reservation comes back.
            self.state.reservations[key] = held
        if job.queue not in self.raw_queues or job.queue not in self.state.queues:
            unusable = self.invalid.get(f"queue/{job.queue}")
            self.invalid[f"podgroup/{key}"] = (
                f"queue {job.queue!r} does not exist" if unusable is None
                else f"queue {job.queue!r} is not usable: {unusable}")
            self._orphan_job(job, existing)
            return
        self.invalid.pop(f"podgroup/{key}", None)
        if existing is not None and existing.queue != job.queue:
            self.state.remove_job(key)  # moves its pods' accounting to the new queue
            existing = None
        self.state.upsert_job(job)
        if key in self._orphans:
            self._orphans.discard(key)
            self._drop_orphan_queue()
        if existing is None:
            for pod_key in sorted(self._pods_by_job.get(key, ()), key=self._index_of):
                self._apply_pod(pod_key)

    def _orphan_job(self, job: Job, existing: Job | None) -> None:
        """Keep a job whose queue is missing outside the queue tree: its bound pods still
        hold their nodes' resources; its pending pods are left out (never placed), and no
        eviction picks its pods (non-preemptible, never stale)."""
        job.queue = ORPHAN_QUEUE
        job.preemptible = False
        job.staleness_grace = -1.0
        if ORPHAN_QUEUE not in self.state.queues:
            self.state.upsert_queue(_orphan_queue())
        if existing is not None and existing.queue != ORPHAN_QUEUE:
            self.state.remove_job(job.key)
            existing = None
        self.state.upsert_job(job)
        self._orphans.add(job.key)
        if existing is None:
            for pod_key in sorted(self._pods_by_job.get(job.key, ()), key=self._index_of):
                self._apply_pod(pod_key)

    def _drop_orphan_queue(self) -> None:
        if not self._orphans and not self._held and ORPHAN_QUEUE in self.state.queues:
            self.state.remove_queue(ORPHAN_QUEUE)

    def _holder_for(self, key: str, raw: Obj) -> str | None:
        """The job that keeps a bound, unfinished pod whose PodGroup is unknown on its node:
        what it holds there is not free until it is gone (the agent stops it first), so
        nothing is bound onto it meanwhile. None for a pod that holds nothing (pending, or
        finished): it waits for its PodGroup as before."""
        phase = (raw.get("status") or {}).get("phase")
        if not (raw.get("spec") or {}).get("nodeName") or phase in ("Succeeded", "Failed"):
            self._drop_holder(key)
            return None
        holder = self._held.get(key)
        if holder is None:
            namespace, _, name = key.partition("/")
            job = Job(name=f"{HOLDER_PREFIX}{name}", namespace=namespace, queue=ORPHAN_QUEUE,
                      preemptible=False, staleness_grace=-1.0)
            if ORPHAN_QUEUE not in self.state.queues:
                self.state.upsert_queue(_orphan_queue())
            self.state.upsert_job(job)
            holder = self._held[key] = job.key
        return holder

    def _drop_holder(self, key: str) -> None:
        """The pod no longer needs its holder job (its PodGroup is known, or it is gone)."""
        holder = self._held.pop(key, None)
        if holder is not None:
            self.state.remove_job(holder)
            self._drop_orphan_queue()

    def pending_pods_of(self, job_key: str) -> list[str]:
        """The job's pods that wait to be placed, in creation order."""
        job = self.state.jobs.get(job_key)
        if job is not None and job.queue != ORPHAN_QUEUE:
            return [k for k in job.pods if self.state.pods[k].status is PodStatus.PENDING]
        return [k for k in sorted(self._pods_by_job.get(job_key, ()), key=self._index_of)
                if not ((self.raw_pods.get(k) or {}).get("spec") or {}).get("nodeName")
                and k not in self.assumed]

    def job(self, key: str) -> Job | None:
        return self.state.jobs.get(key)

    # -- pods ---------------------------------------------------------------------------

    def ours(self, pod: Obj) -> bool:
        return (pod.get("spec") or {}).get("schedulerName") in self.scheduler_names

    def on_pod(self, kind: str, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        if kind == "DELETED" or not self.ours(obj):
            self._forget_pod(key)
            self._note_foreign(key, None if kind == "DELETED" else obj)
            return
        old = self.raw_pods.get(key)
        if old is not None and _older(obj, old):
            return  # a read that raced a newer watch event
        self._reindex_pod(key, obj)
        if (obj.get("spec") or {}).get("nodeName"):
            self.assumed.pop(key, None)  # the bind is visible now
            self.state.bind_backoff.forget(key)
        self._apply_pod(key)

    def _note_foreign(self, key: str, pod: Obj | None) -> None:
        """Keep each node's capacity net of what other schedulers' pods hold there."""
        node = None
        held = (0, 0)
        if pod is not None:
            spec = pod.get("spec") or {}
            phase = (pod.get("status") or {}).get("phase")
            if spec.get("nodeName") and phase not in ("Succeeded", "Failed"):
                node = str(spec["nodeName"])
                held = cpu_memory_requests(pod)
        before = self._foreign_node.get(key)
        if before == node and (node is None or self.foreign.get(node, {}).get(key) == held):
            return
        if before is not None:
            self.foreign.get(before, {}).pop(key, None)
            self._foreign_node.pop(key, None)
        if node is not None:
            self.foreign.setdefault(node, {})[key] = held
            self._foreign_node[key] = node
        for changed in {before, node} - {None}:
            raw = self.raw_nodes.get(changed)  # type: ignore[arg-type]
            if raw is not None:
                self.on_node("MODIFIED", raw)

    def _reindex_pod(self, key: str, obj: Obj) -> None:
        old = self.raw_pods.get(key)
        if old is not None:
            self._unindex_pod(key, old)
        self.raw_pods[key] = obj
        job_key = self._resolve_job(obj)
        self._job_of_pod[key] = job_key
        if job_key:
            self._pods_by_job.setdefault(job_key, set()).add(key)
        else:
            for uid in _candidate_owner_uids(obj):
                self._waiting_by_owner.setdefault(uid, set()).add(key)
        node = (obj.get("spec") or {}).get("nodeName")
        if node:
            self._pods_by_node.setdefault(str(node), set()).add(key)

    def _resolve_job(self, pod: Obj) -> str | None:
        """The pod's PodGroup: its annotation, else the group owned by the pod or by its
        controller (what the pod-grouper creates for bare pods, Jobs and Deployments)."""
        named = _job_key(pod)
        if named:
            return named
        namespace = (pod.get("metadata") or {}).get("namespace")
        for uid in _candidate_owner_uids(pod):
            pg_key = self._pg_by_owner.get(uid)
            if pg_key is not None and pg_key.startswith(f"{namespace}/"):
                return pg_key
        return None

    def _forget_pod(self, key: str) -> None:
        job_key = self._job_of_pod.get(key)
        if job_key:
            self.dirty_jobs.add(job_key)
        old = self.raw_pods.pop(key, None)
        if old is not None:
            self._unindex_pod(key, old)
        self.assumed.pop(key, None)
        self.evicting.discard(key)
        self.state.bind_backoff.forget(key)
        self._pod_index.pop(key, None)
        self.invalid.pop(f"pod/{key}", None)
        self.state.remove_pod(key)
        self._drop_holder(key)
        if job_key in self._deleted_jobs and not self._on_nodes(job_key):
            self._remove_job(job_key)

    def _unindex_pod(self, key: str, pod: Obj) -> None:
        job_key = self._job_of_pod.pop(key, None)
        for uid in _candidate_owner_uids(pod):
            waiting = self._waiting_by_owner.get(uid)
            if waiting is not None:
                waiting.discard(key)
                if not waiting:
                    del self._waiting_by_owner[uid]
        if job_key and job_key in self._pods_by_job:
            self._pods_by_job[job_key].discard(key)
            if not self._pods_by_job[job_key]:
                del self._pods_by_job[job_key]
        node = (pod.get("spec") or {}).get("nodeName")
        if node and node in self._pods_by_node:
            self._pods_by_node[node].discard(key)

    def _index_of(self, key: str) -> int:
        index = self._pod_index.get(key)
        if index is None:
            index = next(self._counter)
            self._pod_index[key] = index
        return index

    def _apply_pod(self, key: str) -> None:
        raw = self.raw_pods.get(key)
        if raw is None:
            return
        job_key = self._job_of_pod.get(key)
        if job_key and job_key in self.state.jobs:
            self._drop_holder(key)
        else:
            job_key = self._holder_for(key, raw)
            if job_key is None:
                self.state.remove_pod(key)  # not schedulable until its PodGroup is known
                return
        orphan = self.state.jobs[job_key].queue == ORPHAN_QUEUE
        status = raw.get("status") or {}
        started = timestamp(status.get("startTime")) or timestamp(
            (raw.get("metadata") or {}).get("creationTimestamp")
        )
        try:
            pod = pod_from_api(raw, job_key, self._index_of(key), started, self._taint_sets)
        except TranslateError as error:
            self.invalid[f"pod/{key}"] = str(error)
            self.state.remove_pod(key)
            return
        except (AttributeError, TypeError, ValueError, KeyError) as error:
            # A shape validation refuses, stored before it (or by an older server).
            log.warning("pod %s cannot be scheduled: malformed (%r)", key, error)
            self.invalid[f"pod/{key}"] = f"malformed pod: {error}"
            self.state.remove_pod(key)
            return
        self.invalid.pop(f"pod/{key}", None)
        if key in self.evicting and pod.status is PodStatus.RUNNING:
            pod.status = PodStatus.RELEASING
        assumed = self.assumed.get(key)
        if assumed is not None and pod.status is PodStatus.PENDING:
            pod.status = PodStatus.BINDING
            pod.node = assumed.node
            pod.gpu_indices = assumed.gpu_indices
            pod.portion = assumed.portion
        if pod.node is not None and pod.node not in self.state.nodes:
            self.state.remove_pod(key)  # its node is not registered (yet)
            return
        if (orphan or job_key in self._deleted_jobs) and pod.status is PodStatus.PENDING:
            self.state.remove_pod(key)  # its queue is gone: it waits for it; or its group is
            return
        existing = self.state.pods.get(key)
        if existing is not None and _same_pod(existing, pod):
            return
        try:
            self.state.upsert_pod(pod)
            self.dirty_jobs.add(job_key)
        except StateError as error:
            self.invalid[f"pod/{key}"] = str(error)

    # -- binds --------------------------------------------------------------------------

    def assume(self, key: str, node: str, gpu_indices: tuple[int, ...], portion: int) -> None:
        self.assumed[key] = Assumed(node, gpu_indices, portion)

    def bind_failed(self, key: str) -> None:
        """Drop the assumption; the pod is pending again (unless the watch says bound),
        and the core holds it back for more cycles the more binds failed in a row."""
        self.state.bind_backoff.bind_failed(key)
        if self.assumed.pop(key, None) is not None:
            pod = self.state.pods.get(key)
            if pod is not None:
                self.state.remove_pod(key)
            self._apply_pod(key)

    def evict_failed(self, key: str) -> None:
        """The deletion was refused: the pod holds its resources as before."""
        if key in self.evicting:
            self.evicting.discard(key)
            self.state.remove_pod(key)
            self._apply_pod(key)

    def pods_of_job(self, job_key: str) -> set[str]:
        """Keys of the watched pods that belong to the PodGroup, scheduled or not."""
        return set(self._pods_by_job.get(job_key, ()))

    def pod_group_of(self, pod_key: str) -> str | None:
        return self._job_of_pod.get(pod_key)


def _owner_uids(obj: Obj) -> list[str]:
    return [str(ref["uid"]) for ref in (obj.get("metadata") or {}).get("ownerReferences") or []
            if ref.get("uid")]


def _candidate_owner_uids(pod: Obj) -> list[str]:
    """The pod's own uid, then its controller's."""
    meta = pod.get("metadata") or {}
    uids = [str(meta["uid"])] if meta.get("uid") else []
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller") and ref.get("uid"):
            uids.append(str(ref["uid"]))
    return uids


def _job_key(pod: Obj) -> str | None:
    meta = pod.get("metadata") or {}
    name = (meta.get("annotations") or {}).get(PODGROUP_ANNOTATION)
    if not name:
        return None
    return f"{meta.get('namespace')}/{name}"


def _older(new: Obj, old: Obj) -> bool:
    """Whether ``new`` is an older version than ``old`` (numeric resourceVersions only)."""
    a = str((new.get("metadata") or {}).get("resourceVersion", ""))
    b = str((old.get("metadata") or {}).get("resourceVersion", ""))
    return a.isdigit() and b.isdigit() and int(a) < int(b)


def _same_node(a: Any, b: Any) -> bool:
    return (
        a.gpus == b.gpus
        and a.gpu_memory_mib == b.gpu_memory_mib
        and a.cpu_millis == b.cpu_millis
        and a.memory_bytes == b.memory_bytes
        and a.max_pods == b.max_pods
        and a.labels == b.labels
        and a.ready == b.ready
    )


def _same_pod(a: Any, b: Any) -> bool:
    return (
        a.job == b.job
        and a.status is b.status
        and a.node == b.node
        and a.gpu_indices == b.gpu_indices
        and a.portion == b.portion
        and a.gpu == b.gpu
        and a.cpu_millis == b.cpu_millis
        and a.memory_bytes == b.memory_bytes
        and a.node_selector == b.node_selector
        and a.node_affinity == b.node_affinity
        and a.subgroup == b.subgroup
    )
