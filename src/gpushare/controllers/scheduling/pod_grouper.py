"""The pod-grouper: every pod of ours belongs to a PodGroup that describes its gang.

It follows each pod's owner chain to the top owner, creates or updates that workload's
PodGroup and annotates the pod with ``pod-group-name``.
"""

from __future__ import annotations

import logging
import threading
import time

from gpushare.api.contracts import PODGROUP_ANNOTATION, SCHEDULER_NAMES
from gpushare.api.objects import Obj
from gpushare.controllers.events import EventRecorder
from gpushare.controllers.scheduling.grouping import (
    DEFAULT_QUEUE,
    owner_chain,
    plan_podgroup,
    skips_grouping,
    spec_differs,
)
from gpushare.kube.client import BY_KIND, JOBS, PODGROUPS, PODS, ApiError, KubeClient, Stopper
from gpushare.kube.informer import WorkQueue, start_workers
from gpushare.kube.informers import InformerFactory

log = logging.getLogger(__name__)

WORKERS = 16  # concurrent reconciles: API round trips overlap
ANNOTATION_WORKERS = 8
ANNOTATION_YIELD_SECONDS = 0.01
ANNOTATION_MAX_WAIT_SECONDS = 5.0  # under steady churn, annotations still get written

OWNER_CACHE_SECONDS = 5.0
OWNER_CACHE_SIZE = 10000  # past this, expired entries are dropped



class PodGrouper:
    name = "pod-grouper"

    def __init__(
        self,
        client: KubeClient,
        informers: InformerFactory,
        stopper: Stopper,
        events: EventRecorder,
        *,
        scheduler_names: tuple[str, ...] = SCHEDULER_NAMES,
        default_queue: str = DEFAULT_QUEUE,
    ) -> None:
        self.client = client
        self.stopper = stopper
        self.events = events
        self.scheduler_names = scheduler_names
        self.default_queue = default_queue
        self.pods = informers.get(PODS)
        self.podgroups = informers.get(PODGROUPS)
        self.informers = informers
        informers.get(JOBS)  # Job owners are read from this cache (a GET only while it lags)
        self.queue = WorkQueue()
        self.workers = WORKERS
        self.annotations = WorkQueue()
        self._annotate_as: dict[str, str] = {}  # pod key -> PodGroup name to write
        # Owners read with GET (kinds without a watch here), briefly cached by uid.
        self._owner_cache: dict[str, tuple[float, Obj | None]] = {}
        # PodGroups written but not yet seen by the watch: a lagging cache must not
        # make us create them twice.
        self._written: dict[str, Obj] = {}
        self.pods.add_handler(self._on_pod)
        self.podgroups.add_handler(self._on_podgroup)

    def start(self) -> list[threading.Thread]:
        return start_workers(
            self.queue, self.reconcile, self.stopper, self.name, self.workers
        ) + start_workers(
            self.annotations, self.annotate, self.stopper, f"{self.name}-annotate",
            ANNOTATION_WORKERS,
        )

    # -- events -------------------------------------------------------------------------

    def ours(self, pod: Obj) -> bool:
        return (pod.get("spec") or {}).get("schedulerName") in self.scheduler_names

    def _on_pod(self, kind: str, pod: Obj, old: Obj | None) -> None:
        if kind == "DELETED" or not self.ours(pod):
            return
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return
        if old is not None and _same_grouping_inputs(pod, old):
            return
        self.queue.add(f"{meta.get('namespace')}/{meta.get('name')}")

    def _on_podgroup(self, kind: str, pg: Obj, old: Obj | None) -> None:
        meta = pg.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        self._written.pop(key, None)
        if kind != "DELETED":
            return
        # A PodGroup deleted under live pods: regroup them.
        name = meta.get("name")
        for pod in self.pods.items():
            pmeta = pod.get("metadata") or {}
            if (pmeta.get("annotations") or {}).get(PODGROUP_ANNOTATION) == name and pmeta.get(
                "namespace"
            ) == meta.get("namespace"):
                self.queue.add(f"{pmeta.get('namespace')}/{pmeta.get('name')}")

    # -- reconcile ----------------------------------------------------------------------

    def lookup(self, kind: str, namespace: str, name: str, uid: str) -> Obj | None:
        resource = BY_KIND.get(kind)
        if resource is None:
            return None
        informer = self.informers.existing(resource)
        if informer is not None:
            cached = informer.get(f"{namespace}/{name}" if resource.namespaced else name)
            if cached is not None and (cached.get("metadata") or {}).get("uid") == uid:
                return cached
        hit = self._owner_cache.get(uid)
        now = time.monotonic()
        if hit is not None and now - hit[0] < OWNER_CACHE_SECONDS:
            return hit[1]
        try:
            found = self.client.get(resource.item(name, namespace if resource.namespaced else None))
        except ApiError as error:
            log.debug("owner %s %s/%s unreadable: %s", kind, namespace, name, error)
            found = None
        if found is not None and (found.get("metadata") or {}).get("uid") != uid:
            found = None  # a newer object of the same name
        if len(self._owner_cache) > OWNER_CACHE_SIZE:
            self._owner_cache = {
                k: v for k, v in self._owner_cache.items() if now - v[0] < OWNER_CACHE_SECONDS
            }
        self._owner_cache[uid] = (now, found)
        return found

    def reconcile(self, key: str) -> None:
        pod = self.pods.get(key)
        if pod is None or not self.ours(pod):
            return
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return
        chain = owner_chain(pod, self.lookup)
        if skips_grouping(chain):
            return
        plan = plan_podgroup(chain, self.default_queue)
        named = (meta.get("annotations") or {}).get(PODGROUP_ANNOTATION)
        if named and named != plan.name:
            return  # the pod joins a PodGroup made elsewhere; ours would be pg-<owner>-<uid>
        for warning in plan.warnings:
            self.events.emit(pod, "Warning", "PodGrouperWarning", warning)
        pg_key = f"{plan.namespace}/{plan.name}"
        existing = self.podgroups.get(pg_key) or self._written.get(pg_key)
        if existing is None:
            try:
                created = self.client.create(PODGROUPS.collection(plan.namespace), plan.body())
                self._written[pg_key] = created
            except ApiError as error:
                if error.status != 409:
                    raise
                existing = self.client.get(PODGROUPS.item(plan.name, plan.namespace))
        if existing is not None and spec_differs(existing, plan):
            updated = self.client.merge_patch(
                PODGROUPS.item(plan.name, plan.namespace),
                {"spec": plan.spec(), "metadata": {"labels": plan.body()["metadata"]["labels"]}},
            )
            self._written[pg_key] = updated
        if (meta.get("annotations") or {}).get(PODGROUP_ANNOTATION) != plan.name:
            self._annotate_as[key] = plan.name
            self.annotations.add(key)

    def annotate(self, key: str) -> None:
        """Write ``pod-group-name`` on the pod.

        PodGroups come first: the scheduler can place a pod as soon as the group owned by
        the pod (or its controller) exists, so during a burst the annotations wait until
        no PodGroup is left to write (or ANNOTATION_MAX_WAIT_SECONDS)."""
        waited = 0.0
        while len(self.queue) > 0 and waited < ANNOTATION_MAX_WAIT_SECONDS:
            if self.stopper.wait(ANNOTATION_YIELD_SECONDS):
                return
            waited += ANNOTATION_YIELD_SECONDS
        name = self._annotate_as.pop(key, None)
        pod = self.pods.get(key)
        if name is None or pod is None:
            return
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp") or (meta.get("annotations") or {}).get(
            PODGROUP_ANNOTATION
        ) == name:
            return
        try:
            self.client.merge_patch(
                PODS.item(str(meta.get("name")), str(meta.get("namespace"))),
                {"metadata": {"annotations": {PODGROUP_ANNOTATION: name}}},
            )
        except ApiError as error:
            if not error.not_found:
                self._annotate_as.setdefault(key, name)
                raise


def _same_grouping_inputs(pod: Obj, old: Obj) -> bool:
    """Whether an update changed nothing the grouping reads (status-only updates)."""
    new_meta = pod.get("metadata") or {}
    old_meta = old.get("metadata") or {}
    return (
        new_meta.get("labels") == old_meta.get("labels")
        and (new_meta.get("annotations") or {}).get(PODGROUP_ANNOTATION)
        == (old_meta.get("annotations") or {}).get(PODGROUP_ANNOTATION)
        and new_meta.get("ownerReferences") == old_meta.get("ownerReferences")
        and bool(new_meta.get("deletionTimestamp")) == bool(old_meta.get("deletionTimestamp"))
    )
