"""The syncer of one virtual cluster: tenant pods onto the host, host state back.

It speaks only the Kubernetes API: the tenant's objects through the tenant cluster's
endpoint (``/clusters/<tenant>``), the host's through the host's, each with its own
client, so that it runs the same against a real host cluster.

Each tenant pod is one key. A reconcile looks at both sides and makes them agree:

* tenant pod, no host pod: create it (and first the ConfigMaps/Secrets it references and
  the PodGroup of its workload) — unless the tenant pod was synced before (it carries the
  host pod's uid), in which case the host pod was deleted on the host and the tenant pod
  goes too;
* host pod, no tenant pod: the tenant deleted it, so the host pod is deleted;
* both: deletion on one side is carried to the other with the same grace period, the
  host's binding becomes the tenant pod's binding, the host's status the tenant pod's.

A restart resumes from what is on both sides: the host pod's name is a function of the
tenant pod's, and its labels and annotations say whose it is, so nothing is created twice
or lost. Before deleting on the strength of an object missing from a cache, the syncer
reads it once from the API (a cache that lags must not delete anything).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from gpushare.api.contracts import PODGROUP_ANNOTATION
from gpushare.api.objects import Meta, Obj, controller_reference, metadata
from gpushare.api.shapes import pod_causes
from gpushare.api.timefmt import rfc3339, timestamp
from gpushare.controllers.events import EventRecorder
from gpushare.controllers.scheduling.grouping import (
    PodGroupPlan,
    owner_chain,
    plan_podgroup,
    reference_to,
)
from gpushare.controllers.workloads.cronjobs import CronJobController
from gpushare.controllers.workloads.disruption import DisruptionController
from gpushare.controllers.workloads.job_controller import JobController
from gpushare.controllers.workloads.statefulsets import StatefulSetController
from gpushare.controllers.workloads.workload_controllers import (
    DeploymentController,
    ReplicaSetController,
)
from gpushare.kube.client import (
    BY_KIND,
    CONFIGMAPS,
    EVENTS,
    NODES,
    PODGROUPS,
    PODS,
    PRIORITY_CLASSES,
    QUEUES,
    SECRETS,
    ApiError,
    KubeClient,
    Stopper,
)
from gpushare.kube.informer import Informer, WorkQueue, start_workers
from gpushare.kube.informers import InformerFactory
from gpushare.tenancy import metrics, names, redact, translate, views
from gpushare.tenancy.policy import TenantPolicy

log = logging.getLogger(__name__)

WORKERS = 4
SWEEP_SECONDS = 10.0
RESYNC_SECONDS = 10.0
SEEN_UIDS_KEPT = 10_000
PODGROUP_GRACE_SECONDS = 30.0
PAUSED_REASON = "VirtualClusterPaused"


@dataclass
class HostViews:
    """The host informers every tenant's syncer reads (one watch each, shared)."""

    pods: Informer
    events: Informer
    podgroups: Informer
    nodes: Informer
    queues: Informer
    priority_classes: Informer
    usage: views.HostUsage = field(default_factory=views.HostUsage)


@dataclass
class _Pending:
    """Host pods created but not yet seen by the host watch.

    The create's answer can come back after the watch already told of the pod (and even
    of its deletion): ``seen`` keeps the uids the watch reported lately, so such an answer
    is not taken for a pod still on its way."""

    created: dict[str, Obj] = field(default_factory=dict)
    seen: OrderedDict[str, None] = field(default_factory=OrderedDict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def saw(self, name: str, uid: str) -> None:
        """The host watch reported the pod ``name`` (uid ``uid``)."""
        with self.lock:
            self.created.pop(name, None)
            if uid:
                self.seen[uid] = None
                self.seen.move_to_end(uid)
                while len(self.seen) > SEEN_UIDS_KEPT:
                    self.seen.popitem(last=False)

    def add(self, name: str, pod: Obj) -> None:
        """A create answered with ``pod``: pending, unless the watch has reported it."""
        with self.lock:
            if Meta.of(pod).uid not in self.seen:
                self.created[name] = pod


class TenantSyncer:
    """Keeps one virtual cluster's pods and the host's in agreement."""

    def __init__(self, policy: TenantPolicy, host: KubeClient, views_: HostViews,
                 tenant: KubeClient, *, workload_controllers: bool = True) -> None:
        self.policy = policy
        self.name = policy.name
        self.uid = policy.uid
        self.host = host
        self.h = views_
        self.tenant = tenant
        self.host_ns = names.host_namespace(self.name)
        self.stopper = Stopper()
        self.informers = InformerFactory(tenant, self.stopper)
        self.pods = self.informers.get(PODS)
        self.config_maps = self.informers.get(CONFIGMAPS)
        self.secrets = self.informers.get(SECRETS)
        self.podgroups = self.informers.get(PODGROUPS)
        self.tenant_nodes = self.informers.get(NODES)
        self.tenant_queues = self.informers.get(QUEUES)
        self.tenant_classes = self.informers.get(PRIORITY_CLASSES)
        self.events = EventRecorder(tenant, "gpushare-controllers", self.stopper)
        self.controllers: list[Any] = []
        if workload_controllers:
            self.controllers = [
                JobController(tenant, self.informers, self.stopper, self.events),
                ReplicaSetController(tenant, self.informers, self.stopper, self.events),
                DeploymentController(tenant, self.informers, self.stopper, self.events),
                CronJobController(tenant, self.informers, self.stopper, self.events),
                StatefulSetController(tenant, self.informers, self.stopper, self.events),
                DisruptionController(tenant, self.informers, self.stopper),
            ]
        self.queue = WorkQueue()
        self.threads: list[threading.Thread] = []
        self._pending = _Pending()
        self._copies: dict[tuple[str, str, str], str] = {}  # (kind, ns, name) -> tenant rv
        self._events_written: dict[str, tuple[Any, ...]] = {}
        self._view_queued = False
        self._view_lock = threading.Lock()
        self._bind_seen: dict[str, float] = {}  # host pod name -> when its binding was seen
        self._create_seen: dict[str, float] = {}  # tenant "ns/name" -> when it was first seen
        self._malformed: set[str] = set()  # uids of tenant pods refused as malformed (told)
        self._last_sweep = 0.0
        self.ready = threading.Event()
        self.pods.add_handler(self._on_tenant_pod)
        self.config_maps.add_handler(self._on_tenant_ref("c"))
        self.secrets.add_handler(self._on_tenant_ref("s"))
        for informer in (self.tenant_nodes, self.tenant_queues, self.tenant_classes):
            informer.add_handler(lambda *_: self.view_changed())

    # -- running ----------------------------------------------------------------------------

    def start(self, sync_timeout: float = 30.0) -> None:
        self.informers.start()
        if not self.informers.wait_synced(sync_timeout):
            raise TimeoutError(f"virtual cluster {self.name}: caches did not fill in "
                               f"{sync_timeout:.0f}s")
        self.events.start()
        for controller in self.controllers:
            self.threads.extend(controller.start())
        self.threads.extend(start_workers(self.queue, self.reconcile, self.stopper,
                                          f"syncer-{self.name}", WORKERS))
        # What is on the host now (a restart resumes from both sides).
        for pod in self.h.pods.items():
            self.on_host_pod("ADDED", pod, None)
        for event in self.h.events.items():
            self.on_host_event("ADDED", event, None)
        self.view_changed()
        self.queue.add_after("r:", RESYNC_SECONDS)
        self.ready.set()

    def stop(self) -> None:
        self.stopper.stop()
        self.queue.close()
        self.informers.stop()
        self.tenant.close()

    def set_policy(self, policy: TenantPolicy) -> None:
        changed = policy != self.policy
        paused_changed = policy.paused != self.policy.paused
        self.policy = policy
        if paused_changed:
            keys = self.pods.keys()
            for key in keys:
                self.queue.add("p:" + key)
            for pod in self.h.pods.items():
                self.on_host_pod("MODIFIED", pod, None)
        if changed:
            self.view_changed()

    # -- event handlers (informer threads: only enqueue) --------------------------------------

    def _on_tenant_pod(self, kind: str, pod: Obj, old: Obj | None) -> None:
        m = Meta.of(pod)
        key = f"{m.namespace}/{m.name}"
        if kind == "ADDED" and old is None and not Meta.of(pod).annotations.get(
                names.HOST_UID_ANNOTATION):
            self._create_seen[key] = time.monotonic()
        elif kind == "DELETED":
            self._create_seen.pop(key, None)
        self.queue.add(f"p:{key}")

    def _on_tenant_ref(self, prefix: str) -> Any:
        def handler(kind: str, obj: Obj, old: Obj | None) -> None:
            m = Meta.of(obj)
            key = (prefix, m.namespace, m.name)
            if key in self._copies:
                self.queue.add(f"{prefix}:{key[1]}/{key[2]}")
        return handler

    def on_host_pod(self, kind: str, pod: Obj, old: Obj | None) -> None:
        m = Meta.of(pod)
        if m.namespace != self.host_ns:
            return
        labels = Meta.of(pod).labels
        if labels.get(names.TENANT_LABEL) != self.name:
            return
        self._pending.saw(m.name, m.uid)
        if (pod.get("spec") or {}).get("nodeName") and not ((old or {}).get("spec") or {}).get(
                "nodeName"):
            self._bind_seen[m.name] = time.monotonic()
        tenant_object = Meta.of(pod).annotations.get(names.TENANT_OBJECT_ANNOTATION)
        if tenant_object:
            self.queue.add(f"p:{tenant_object}")

    def on_host_event(self, kind: str, event: Obj, old: Obj | None) -> None:
        m = Meta.of(event)
        if kind == "DELETED" or m.namespace != self.host_ns:
            return
        if (event.get("involvedObject") or {}).get("kind") == "Pod":
            self.queue.add(f"e:{m.name}")

    def view_changed(self, delay: float = 0.2) -> None:
        with self._view_lock:
            if self._view_queued:
                return
            self._view_queued = True
        self.queue.add_after("v:", delay)

    # -- reconcile ------------------------------------------------------------------------

    def reconcile(self, key: str) -> None:
        kind, _, rest = key.partition(":")
        try:
            if kind == "p":
                ns, _, name = rest.partition("/")
                self.sync_pod(ns, name)
            elif kind in ("c", "s"):
                ns, _, name = rest.partition("/")
                self.sync_copy(kind, ns, name)
            elif kind == "e":
                self.sync_event(rest)
            elif kind == "v":
                with self._view_lock:
                    self._view_queued = False
                self.sync_views()
            elif kind == "r":
                self.queue.add_after("r:", RESYNC_SECONDS)
                self.resync()
        except ApiError:
            metrics.SYNC_ERRORS.labels(self.name).inc()
            raise
        if time.monotonic() - self._last_sweep > SWEEP_SECONDS:
            self._last_sweep = time.monotonic()
            self.sweep()

    def resync(self) -> None:
        """Queue again every tenant pod that waits on the host: one being deleted, or one
        synced whose host pod the cache no longer has. Events bring these on; this makes
        sure that one change missed or taken in an unlucky order is caught within
        ``RESYNC_SECONDS`` instead of leaving the tenant pod behind."""
        for t in self.pods.items():
            tm = Meta.of(t)
            ns, name = tm.namespace, tm.name
            waiting = tm.deleting
            if not waiting and Meta.of(t).annotations.get(names.HOST_UID_ANNOTATION):
                waiting = self.h.pods.get(
                    f"{self.host_ns}/{names.host_name(name, ns)}") is None
            if waiting:
                self.queue.add(f"p:{ns}/{name}")

    def _host_pod(self, host_name: str) -> Obj | None:
        pod = self.h.pods.get(f"{self.host_ns}/{host_name}")
        if pod is None:
            with self._pending.lock:
                pod = self._pending.created.get(host_name)
        return pod

    def sync_pod(self, ns: str, name: str) -> None:
        t = self.pods.get(f"{ns}/{name}")
        hname = names.host_name(name, ns)
        h = self._host_pod(hname)
        if h is not None and (Meta.of(h).annotations.get(names.TENANT_OBJECT_ANNOTATION)
                              != f"{ns}/{name}"):
            log.error("%s: host pod %s/%s belongs to another tenant pod; %s/%s not synced",
                      self.name, self.host_ns, hname, ns, name)
            return
        if t is None:
            if (h is not None and not Meta.of(h).deleting
                    and self.tenant.get(PODS.item(name, ns)) is None):  # not a lagging cache
                self._delete_host(hname, None, "tenant pod deleted")
            return
        tm = Meta.of(t)
        if h is not None and Meta.of(h).annotations.get(names.TENANT_UID_ANNOTATION) != tm.uid:
            # The host pod of an older tenant pod of the same name.
            if not Meta.of(h).deleting:
                self._delete_host(hname, Meta.of(h).uid, "replaced tenant pod")
            return
        if tm.deleting:
            if h is None:
                if self.host.get(PODS.item(hname, self.host_ns)) is None:
                    self._delete_tenant(t, 0)
            elif not Meta.of(h).deleting:
                self._delete_host(hname, None, "tenant pod deleted", tm.deletion_grace_seconds)
            return
        synced_uid = Meta.of(t).annotations.get(names.HOST_UID_ANNOTATION)
        if h is None:
            if synced_uid:
                live = self.host.get(PODS.item(hname, self.host_ns))
                if live is None or Meta.of(live).uid != synced_uid:
                    # Deleted on the host (evicted, reclaimed, removed by an admin).
                    if self.policy.paused:
                        self._park(t)
                    else:
                        self._delete_tenant(t, 0)
                    return
                h = live
            elif self.policy.paused:
                self._mark_paused(t)
                return
            else:
                self._create_host(t, hname)
                return
        hm = Meta.of(h)
        if self.policy.paused and not hm.deleting:
            self._delete_host(hname, None, "virtual cluster paused")
            return
        if hm.deleting:
            if self.policy.paused:
                return  # parked (made again unbound) once the host pod is gone
            grace = hm.deletion_grace_seconds
            self._delete_tenant(t, grace if grace is not None else 0)
            return
        if synced_uid != hm.uid:
            self.tenant.merge_patch(PODS.item(name, ns), {"metadata": {"annotations": {
                names.HOST_UID_ANNOTATION: hm.uid, names.HOST_NAME_ANNOTATION: hname}}})
        host_node = (h.get("spec") or {}).get("nodeName")
        if host_node and not (t.get("spec") or {}).get("nodeName"):
            try:
                self.tenant.create(PODS.item(name, ns, "binding"), translate.binding_for(t, h))
            except ApiError as error:
                if error.status != 409:
                    raise
            seen = self._bind_seen.pop(hname, None)
            if seen is not None:
                metrics.SYNC_SECONDS.labels(self.name, "to_tenant").observe(
                    time.monotonic() - seen)
            metrics.SYNC_ACTIONS.labels(self.name, "pod", "bind").inc()
            return  # the status follows on the binding's watch event
        status = redact.redact_status(translate.tenant_status(h), self.policy.queues,
                                      self._own_pod)
        if status and status != (t.get("status") or {}):
            body = {**t, "status": status}
            self.tenant.replace(PODS.item(name, ns, "status"), body)
            metrics.SYNC_ACTIONS.labels(self.name, "pod", "status").inc()

    def _create_host(self, t: Obj, hname: str) -> None:
        tm = Meta.of(t)
        ns, name = tm.namespace, tm.name
        causes = pod_causes(t)
        if causes:
            # Stored before validation: never synced (a translation would drop what it
            # cannot read); said once, naming the field.
            why = "; ".join(f"{c.field}: {c.message}" for c in causes[:5])
            uid = tm.uid
            if uid not in self._malformed:
                self._malformed.add(uid)
                log.warning("%s: tenant pod %s/%s is malformed, not synced: %s", self.name,
                            ns, name, why)
                self.events.emit(t, "Warning", "FailedSync",
                                 f"not synced to the host: the pod is malformed: {why}")
            return
        self._sync_references(t)
        queue, pg_name, pg_body = self._plan_podgroup(t)
        body = translate.host_pod(self.name, t, queue, pg_name)
        try:
            created = self.host.create(PODS.collection(self.host_ns), body)
        except ApiError as error:
            if error.status != 409:
                raise
            created = self.host.get(PODS.item(hname, self.host_ns)) or {}
        else:
            metrics.SYNC_ACTIONS.labels(self.name, "pod", "create").inc()
            seen = self._create_seen.pop(f"{ns}/{name}", None)
            if seen is not None:
                metrics.SYNC_SECONDS.labels(self.name, "to_host").observe(
                    time.monotonic() - seen)
            self._pending.add(hname, created)
        # The PodGroup after the pod: the scheduler takes them in either order, and the
        # pod is on the host one round trip sooner.
        self._ensure_podgroup(pg_body)
        if Meta.of(created).annotations.get(names.TENANT_UID_ANNOTATION) != tm.uid:
            self.queue.add_after(f"p:{ns}/{name}", 0.5)  # an old host pod still going away
            return
        self.tenant.merge_patch(PODS.item(name, ns), {"metadata": {"annotations": {
            names.HOST_UID_ANNOTATION: Meta.of(created).uid,
            names.HOST_NAME_ANNOTATION: hname}}})

    def _delete_host(self, hname: str, uid: str | None, why: str,
                     grace: int | None = None) -> None:
        log.debug("%s: deleting host pod %s (%s)", self.name, hname, why)
        try:
            self.host.delete(PODS.item(hname, self.host_ns), uid=uid,
                             grace_period_seconds=grace)
        except ApiError as error:
            if error.status != 409:  # 409: a newer pod of that name; it is not ours to delete
                raise
        metrics.SYNC_ACTIONS.labels(self.name, "pod", "delete-host").inc()

    def _delete_tenant(self, t: Obj, grace: int) -> None:
        tm = Meta.of(t)
        self.tenant.delete(PODS.item(tm.name, tm.namespace),
                           uid=tm.uid, grace_period_seconds=grace)
        metrics.SYNC_ACTIONS.labels(self.name, "pod", "delete-tenant").inc()

    # -- pause --------------------------------------------------------------------------------

    def _park(self, t: Obj) -> None:
        """A paused tenant's pod whose host pod is gone: a pod of a workload is deleted (its
        controller makes a new one, which waits); a bare pod is made again, unbound, with
        its spec, so that it comes back on resume."""
        tm = Meta.of(t)
        ns, name = tm.namespace, tm.name
        self._delete_tenant(t, 0)
        if controller_reference(t) is not None:
            return
        spec = dict(t.get("spec") or {})
        spec.pop("nodeName", None)
        annotations = {k: v for k, v in Meta.of(t).annotations.items()
                       if k not in (names.HOST_UID_ANNOTATION, names.HOST_NAME_ANNOTATION)
                       and not k.startswith("gpushare.io/")}
        again = {"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": name, "namespace": ns, "labels": Meta.of(t).labels,
                              "annotations": annotations},
                 "spec": spec}
        for _ in range(50):
            try:
                self.tenant.create(PODS.collection(ns), again)
                return
            except ApiError as error:
                if error.status != 409:
                    raise
                time.sleep(0.1)  # the old one is still being removed

    def _mark_paused(self, t: Obj) -> None:
        status = dict(t.get("status") or {})
        conditions = [c for c in status.get("conditions") or () if c.get("type") != "PodScheduled"]
        want = {"type": "PodScheduled", "status": "False", "reason": PAUSED_REASON,
                "message": f"virtual cluster {self.name!r} is paused; the pod runs again when "
                           "it is resumed"}
        if any(c.get("type") == "PodScheduled" and c.get("reason") == PAUSED_REASON
               for c in status.get("conditions") or ()):
            return
        status["conditions"] = [*conditions, {**want, "lastTransitionTime": _now()}]
        status.setdefault("phase", "Pending")
        tm = Meta.of(t)
        self.tenant.replace(PODS.item(tm.name, tm.namespace, "status"),
                            {**t, "status": status})

    # -- ConfigMaps and Secrets -----------------------------------------------------------------

    def _sync_references(self, t: Obj) -> None:
        refs = translate.references(t)
        ns = Meta.of(t).namespace
        for name in refs.config_maps:
            self.sync_copy("c", ns, name)
        for name in refs.secrets:
            self.sync_copy("s", ns, name)

    def sync_copy(self, kind: str, ns: str, name: str) -> None:
        informer, resource = ((self.config_maps, CONFIGMAPS) if kind == "c"
                              else (self.secrets, SECRETS))
        obj = informer.get(f"{ns}/{name}")
        key = (kind, ns, name)
        hname = names.host_name(name, ns, 253)
        if obj is None:
            if key in self._copies:
                self._copies.pop(key, None)
                self.host.delete(resource.item(hname, self.host_ns))
            return
        rv = Meta.of(obj).resource_version
        if self._copies.get(key) == rv:
            return
        want = translate.host_copy(self.name, {**obj, "kind": "ConfigMap" if kind == "c"
                                               else "Secret"})
        current = self.host.get(resource.item(hname, self.host_ns))
        if current is None:
            try:
                self.host.create(resource.collection(self.host_ns), want)
            except ApiError as error:
                if error.status != 409:
                    raise
                current = self.host.get(resource.item(hname, self.host_ns))
        if current is not None and translate.copy_differs(current, want):
            want["metadata"]["resourceVersion"] = Meta.of(current).resource_version
            self.host.replace(resource.item(hname, self.host_ns), want)
        self._copies[key] = rv
        metrics.SYNC_ACTIONS.labels(self.name, resource.plural, "sync").inc()

    # -- workload identity --------------------------------------------------------------------

    def _lookup(self, kind: str, namespace: str, name: str, uid: str) -> Obj | None:
        resource = BY_KIND.get(kind)
        if resource is None:
            return None
        informer = self.informers.existing(resource)
        found = None
        if informer is not None:
            found = informer.get(f"{namespace}/{name}" if resource.namespaced else name)
        if found is None:
            with contextlib.suppress(ApiError):
                found = self.tenant.get(resource.item(name, namespace if resource.namespaced
                                                      else None))
        if found is not None and Meta.of(found).uid != uid:
            return None
        return found

    def _plan_podgroup(self, t: Obj) -> tuple[str, str, Obj]:
        """The host PodGroup of the pod's workload: the tenant's explicit PodGroup, else
        its owner chain's. Returns (queue, name, body)."""
        policy = self.policy
        tm = Meta.of(t)
        ns = tm.namespace
        tenant_pg = None
        named = Meta.of(t).annotations.get(PODGROUP_ANNOTATION)
        if named:
            tenant_pg = self.podgroups.get(f"{ns}/{named}")
        chain = owner_chain(t, self._lookup)
        plan = plan_podgroup(chain, policy.default_queue)
        if tenant_pg is not None:
            plan = PodGroupPlan(
                name=Meta.of(tenant_pg).name, namespace=ns,
                owner=reference_to({**tenant_pg, "kind": "PodGroup"}),
                min_member=int((tenant_pg.get("spec") or {}).get("minMember") or 1),
                queue=str((tenant_pg.get("spec") or {}).get("queue") or plan.queue),
                priority_class_name=str((tenant_pg.get("spec") or {}).get("priorityClassName")
                                        or plan.priority_class_name),
                preemptibility=plan.preemptibility, top_owner_kind="PodGroup")
        queue = plan.queue if plan.queue in policy.queues else policy.default_queue
        priority = plan.priority_class_name
        if policy.priority_classes is not None and priority not in policy.priority_classes:
            priority = policy.priority_classes[0]
        plan = PodGroupPlan(plan.name, plan.namespace, plan.owner, plan.min_member, queue,
                            priority, plan.preemptibility, plan.top_owner_kind)
        want = translate.host_podgroup(self.name, plan, queue, tenant_pg)
        want["spec"]["priorityClassName"] = priority
        return queue, Meta.of(want).name, want

    def _ensure_podgroup(self, want: Obj) -> None:
        """Make the host PodGroup ``want``, or bring it up to date."""
        pg_name = Meta.of(want).name
        current = self.h.podgroups.get(f"{self.host_ns}/{pg_name}")
        if current is None:
            try:
                self.host.create(PODGROUPS.collection(self.host_ns), want)
                metrics.SYNC_ACTIONS.labels(self.name, "podgroup", "create").inc()
            except ApiError as error:
                if error.status != 409:
                    raise
                current = self.host.get(PODGROUPS.item(pg_name, self.host_ns))
        if current is not None and translate.podgroup_differs(current, want):
            self.host.merge_patch(PODGROUPS.item(pg_name, self.host_ns), {"spec": want["spec"]})

    # -- events -------------------------------------------------------------------------------

    def _own_pod(self, namespace: str, name: str) -> str | None:
        """The tenant's `namespace/name` of one of its host pods, else None (redaction)."""
        if namespace != self.host_ns:
            return None
        host = self.h.pods.get(f"{namespace}/{name}")
        return Meta.of(host).annotations.get(names.TENANT_OBJECT_ANNOTATION) or None

    def sync_event(self, name: str) -> None:
        ev = self.h.events.get(f"{self.host_ns}/{name}")
        if ev is None:
            return
        involved = ev.get("involvedObject") or {}
        h = self.h.pods.get(f"{self.host_ns}/{involved.get('name')}")
        if h is None:
            return
        host_notes = Meta.of(h).annotations
        tns, _, tname = str(host_notes.get(names.TENANT_OBJECT_ANNOTATION, "")).partition("/")
        t = self.pods.get(f"{tns}/{tname}")
        if t is None or Meta.of(t).uid != host_notes.get(names.TENANT_UID_ANNOTATION):
            return
        digest = hashlib.sha256(str(name).encode()).hexdigest()[:10]
        ename = f"{str(tname)[:200]}.{digest}"
        fields = (ev.get("reason"), ev.get("message"), ev.get("count"), ev.get("lastTimestamp"),
                  ev.get("type"))
        if self._events_written.get(ename) == fields:
            return
        body: Obj = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": ename, "namespace": tns},
            "involvedObject": {"kind": "Pod", "apiVersion": "v1", "namespace": tns,
                               "name": tname, "uid": Meta.of(t).uid},
            "reason": ev.get("reason"), "type": ev.get("type"),
            "message": redact.redact(str(ev.get("message") or ""), self.policy.queues,
                                     self._own_pod),
            "count": ev.get("count") or 1, "firstTimestamp": ev.get("firstTimestamp"),
            "lastTimestamp": ev.get("lastTimestamp"),
            "source": ev.get("source") or {"component": "gpushare"},
            "reportingComponent": ev.get("reportingComponent") or "",
        }
        body = {k: v for k, v in body.items() if v is not None}
        try:
            self.tenant.create(EVENTS.collection(str(tns)), body)
        except ApiError as error:
            if error.status != 409:
                raise
            current = self.tenant.get(EVENTS.item(ename, str(tns)))
            if current is not None and (current.get("count"), current.get("message")) != (
                    body.get("count"), body.get("message")):
                body["metadata"]["resourceVersion"] = Meta.of(current).resource_version
                self.tenant.replace(EVENTS.item(ename, str(tns)), body)
        self._events_written[ename] = fields
        if len(self._events_written) > 20_000:
            self._events_written.clear()

    # -- views --------------------------------------------------------------------------------

    def sync_views(self) -> None:
        queues = [q for q in self.h.queues.items() if Meta.of(q).name in self.policy.queues]
        want_nodes = views.tenant_nodes(self.h.nodes.items(), self.h.usage.nodes(),
                                        self.h.usage.namespace(self.host_ns), queues)
        self._sync_view(NODES, self.tenant_nodes, want_nodes, ("spec", "status"), status=True)
        want_queues = {Meta.of(q).name: views.tenant_queue(q) for q in queues}
        self._sync_view(QUEUES, self.tenant_queues, want_queues, ("spec", "status"), status=True)
        want_classes = views.tenant_priority_classes(self.h.priority_classes.items(),
                                                     self.policy.priority_classes)
        self._sync_view(PRIORITY_CLASSES, self.tenant_classes, want_classes,
                        ("value", "description", "preemptionPolicy"), status=False,
                        remove_unlabelled=True)

    def _sync_view(self, resource: Any, informer: Informer, want: dict[str, Obj],
                   keys: tuple[str, ...], *, status: bool, remove_unlabelled: bool = False
                   ) -> None:
        for name, obj in want.items():
            current = informer.get(name)
            if current is None:
                try:
                    created = self.tenant.create(resource.collection(), obj)
                except ApiError as error:
                    if error.status != 409:
                        raise
                    continue
                if status and obj.get("status") and created.get("status") != obj["status"]:
                    self.tenant.replace(resource.item(name, None, "status"),
                                        {**created, "status": obj["status"]})
                continue
            if not views.differs(current, obj, keys):
                continue
            version = Meta.of(current).resource_version
            body = {**obj, "metadata": {**metadata(obj), "resourceVersion": version}}
            updated = self.tenant.replace(resource.item(name), body)
            if status and updated.get("status") != obj.get("status"):
                self.tenant.replace(resource.item(name, None, "status"),
                                    {**updated, "status": obj.get("status")})
        for current in informer.items():
            name = Meta.of(current).name
            if name in want:
                continue
            if Meta.of(current).labels.get(names.VIEW_LABEL) == "true" or remove_unlabelled:
                self.tenant.delete(resource.item(name))

    # -- sweeping -----------------------------------------------------------------------------

    def sweep(self) -> None:
        """Host PodGroups and ConfigMap/Secret copies no tenant pod needs any more."""
        used_groups = {Meta.of(p).annotations.get(PODGROUP_ANNOTATION) for p in self.h.pods.items()
                       if Meta.of(p).namespace == self.host_ns}
        now = time.time()
        for pg in self.h.podgroups.items():
            m = Meta.of(pg)
            if m.namespace != self.host_ns or m.name in used_groups:
                continue
            if now - timestamp(m.creation_timestamp) < PODGROUP_GRACE_SECONDS:
                continue
            self.host.delete(PODGROUPS.item(m.name, self.host_ns))
        needed: set[tuple[str, str, str]] = set()
        for pod in self.pods.items():
            refs = translate.references(pod)
            ns = Meta.of(pod).namespace
            needed |= {("c", ns, n) for n in refs.config_maps}
            needed |= {("s", ns, n) for n in refs.secrets}
        for resource, kind in ((CONFIGMAPS, "c"), (SECRETS, "s")):
            listing = self.host.list(resource.collection(self.host_ns),
                                     labelSelector=f"{names.TENANT_LABEL}={self.name}")
            for obj in listing.get("items") or ():
                tns, _, tname = str(Meta.of(obj).annotations.get(
                    names.TENANT_OBJECT_ANNOTATION, "")).partition("/")
                key = (kind, tns, tname)
                if key not in needed:
                    self._copies.pop(key, None)
                    self.host.delete(resource.item(Meta.of(obj).name, self.host_ns))


def _now() -> str:
    return rfc3339(time.time())


