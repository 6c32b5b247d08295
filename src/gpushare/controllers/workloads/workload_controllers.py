"""ReplicaSet, ReplicationController and Deployment controllers, so that serving
workloads run.

Both follow the Job controller's pattern: objects are matched to their owner by the
controller ownerReference, and what a controller has just created counts until the watch
shows it, so a lagging cache never doubles the replicas.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from gpushare.api.objects import Meta, Obj, controller_reference
from gpushare.controllers.events import EventRecorder, now_rfc3339
from gpushare.controllers.workloads.job_controller import random_suffix
from gpushare.controllers.workloads.replicas import (
    plan_deployment,
    plan_replicaset,
    with_replica_failure,
)
from gpushare.kube.client import (
    DEPLOYMENTS,
    PODS,
    REPLICASETS,
    REPLICATIONCONTROLLERS,
    ApiError,
    KubeClient,
    Resource,
    Stopper,
)
from gpushare.kube.informer import Informer, WorkQueue, start_workers
from gpushare.kube.informers import InformerFactory

log = logging.getLogger(__name__)

EXPECTATION_SECONDS = 30.0
WORKERS = 4


class _OwnedIndex:
    """Children (pods, ReplicaSets) by the uid of their controlling owner of one kind,
    plus children created but not yet seen."""

    def __init__(self, owner_kind: str) -> None:
        self.owner_kind = owner_kind
        self._children: dict[str, dict[str, Obj]] = {}
        self._created: dict[str, dict[str, tuple[float, Obj]]] = {}
        self._lock = threading.Lock()

    def observe(self, event: str, child: Obj) -> str | None:
        """Record a child's change; return its owner's uid when it has one of our kind."""
        ref = controller_reference(child)
        if ref is None or ref.get("kind") != self.owner_kind:
            return None
        uid = str(ref.get("uid", ""))
        meta = Meta.of(child)
        key = f"{meta.namespace}/{meta.name}"
        with self._lock:
            children = self._children.setdefault(uid, {})
            if event == "DELETED":
                children.pop(key, None)
                if not children:
                    self._children.pop(uid, None)
            else:
                children[key] = child
            self._created.get(uid, {}).pop(key, None)
        return uid

    def created(self, uid: str, child: Obj) -> None:
        meta = Meta.of(child)
        key = f"{meta.namespace}/{meta.name}"
        with self._lock:
            self._created.setdefault(uid, {})[key] = (time.monotonic(), child)

    def of(self, uid: str) -> list[Obj]:
        now = time.monotonic()
        with self._lock:
            children = dict(self._children.get(uid, {}))
            unseen = self._created.get(uid, {})
            for key, (at, child) in list(unseen.items()):
                if now - at > EXPECTATION_SECONDS:
                    del unseen[key]
                else:
                    children.setdefault(key, child)
        return list(children.values())

    def forget(self, uid: str) -> None:
        with self._lock:
            self._created.pop(uid, None)


class _OwnerController:
    """Reconcile owners (of ``resource``) whose children (of ``child_resource``) change."""

    name = "owner-controller"
    owner_kind = ""

    def __init__(
        self, client: KubeClient, informers: InformerFactory, stopper: Stopper,
        events: EventRecorder, resource: Resource, child_resource: Resource,
    ) -> None:
        self.client = client
        self.stopper = stopper
        self.events = events
        self.resource = resource
        self.owners: Informer = informers.get(resource)
        self.children: Informer = informers.get(child_resource)
        self.index = _OwnedIndex(self.owner_kind)
        self.queue = WorkQueue()
        self._key_by_uid: dict[str, str] = {}
        self.owners.add_handler(self._on_owner)
        self.children.add_handler(self._on_child)

    def start(self) -> list[threading.Thread]:
        return start_workers(self.queue, self.reconcile, self.stopper, self.name, WORKERS)

    def _on_owner(self, event: str, obj: Obj, old: Obj | None) -> None:
        meta = Meta.of(obj)
        uid = meta.uid
        key = f"{meta.namespace}/{meta.name}"
        if event == "DELETED":
            self._key_by_uid.pop(uid, None)
            self.index.forget(uid)
            return
        self._key_by_uid[uid] = key
        self.queue.add(key)

    def _on_child(self, event: str, obj: Obj, old: Obj | None) -> None:
        uid = self.index.observe(event, obj)
        if uid is not None and uid in self._key_by_uid and self._child_changed(event, obj, old):
            self.queue.add(self._key_by_uid[uid])

    def _child_changed(self, event: str, obj: Obj, old: Obj | None) -> bool:
        return True

    def reconcile(self, key: str) -> None:
        raise NotImplementedError


#: How soon a ReplicaSet whose pods could not be created (quota) tries again.
RETRY_FAILED_CREATE_SECONDS = 5.0


class ReplicaSetController(_OwnerController):
    name = "replicaset-controller"
    owner_kind = "ReplicaSet"
    owner_api_version = "apps/v1"

    def __init__(self, client: KubeClient, informers: InformerFactory, stopper: Stopper,
                 events: EventRecorder, resource: Resource = REPLICASETS) -> None:
        super().__init__(client, informers, stopper, events, resource, PODS)

    def _child_changed(self, event: str, obj: Obj, old: Obj | None) -> bool:
        if old is None or event == "DELETED":
            return True
        return _pod_state(old) != _pod_state(obj)

    def reconcile(self, key: str) -> None:
        rs = self.owners.get(key)
        if rs is None or Meta.of(rs).deleting:
            return
        meta = Meta.of(rs)
        uid, namespace = meta.uid, meta.namespace or "default"
        plan = plan_replicaset(rs, self.index.of(uid), random_suffix,
                               (self.owner_api_version, self.owner_kind))
        failure: str | None = None
        not_created = 0
        for body in plan.create:
            if failure is not None:
                not_created += 1
                continue
            try:
                created = self.client.create(PODS.collection(namespace), body)
            except ApiError as error:
                self.events.emit(rs, "Warning", "FailedCreate", f"Error creating pod: {error}")
                if error.status not in (403, 422):  # not refused by admission: retry
                    raise
                failure, not_created = str(error), not_created + 1
                continue
            self.index.created(uid, created)
            self.events.emit(rs, "Normal", "SuccessfulCreate",
                             f"Created pod: {Meta.of(body).name}")
        for name in plan.delete:
            self.client.delete(PODS.item(name, namespace))
            self.events.emit(rs, "Normal", "SuccessfulDelete", f"Deleted pod: {name}")
        current = rs.get("status") or {}
        status = dict(plan.status if plan.status is not None else current)
        for key in ("replicas", "fullyLabeledReplicas"):
            if key in status:
                status[key] = max(int(status[key]) - not_created, 0)
        status = with_replica_failure(status, failure, now_rfc3339())
        if status != current:
            self.client.merge_patch(self.resource.item(meta.name, namespace, "status"),
                                    {"status": {**status, "conditions": status.get(
                                        "conditions")}})
        if failure is not None:
            self.queue.add_after(key, RETRY_FAILED_CREATE_SECONDS)


class ReplicationControllerController(ReplicaSetController):
    """A ReplicationController (core v1) keeps its pods exactly as a ReplicaSet does."""

    name = "replicationcontroller-controller"
    owner_kind = "ReplicationController"
    owner_api_version = "v1"

    def __init__(self, client: KubeClient, informers: InformerFactory, stopper: Stopper,
                 events: EventRecorder) -> None:
        super().__init__(client, informers, stopper, events, REPLICATIONCONTROLLERS)


class DeploymentController(_OwnerController):
    name = "deployment-controller"
    owner_kind = "Deployment"

    def __init__(self, client: KubeClient, informers: InformerFactory, stopper: Stopper,
                 events: EventRecorder) -> None:
        super().__init__(client, informers, stopper, events, DEPLOYMENTS, REPLICASETS)

    def reconcile(self, key: str) -> None:
        deployment = self.owners.get(key)
        if deployment is None or Meta.of(deployment).deleting:
            return
        meta = Meta.of(deployment)
        uid, namespace = meta.uid, meta.namespace or "default"
        plan = plan_deployment(deployment, self.index.of(uid), time.time())
        if plan.create is not None:
            try:
                created = self.client.create(REPLICASETS.collection(namespace), plan.create)
            except ApiError as error:
                if error.status != 409:
                    raise
            else:
                self.index.created(uid, created)
                self.events.emit(deployment, "Normal", "ScalingReplicaSet",
                                 f"Created replica set {Meta.of(plan.create).name}")
        for name, notes in plan.annotate.items():
            self.client.merge_patch(REPLICASETS.item(name, namespace),
                                    {"metadata": {"annotations": notes}})
        if plan.deployment_annotations:
            self.client.merge_patch(DEPLOYMENTS.item(meta.name, namespace),
                                    {"metadata": {"annotations": plan.deployment_annotations}})
        for name, replicas in plan.scale.items():
            self.client.merge_patch(REPLICASETS.item(name, namespace),
                                    {"spec": {"replicas": replicas}})
            self.events.emit(deployment, "Normal", "ScalingReplicaSet",
                             f"Scaled replica set {name} to {replicas}")
        if plan.status is not None:
            self.client.merge_patch(DEPLOYMENTS.item(meta.name, namespace, "status"),
                                    {"status": plan.status})
        if plan.recheck_after is not None:
            self.queue.add_after(key, plan.recheck_after)


def _pod_state(pod: Obj) -> tuple[Any, ...]:
    status = pod.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions") or [])
    return (status.get("phase"), ready, Meta.of(pod).deleting)
