"""The StatefulSet controller, as kube-controller-manager's: pods with stable names.

A StatefulSet ``web`` with ``replicas: 2`` owns pods ``web-0`` and ``web-1``; each carries
``spec.hostname`` (its name) and ``spec.subdomain`` (``spec.serviceName``), and the labels
``statefulset.kubernetes.io/pod-name``, ``apps.kubernetes.io/pod-index`` and
``controller-revision-hash`` (a hash of the pod template: ``<name>-<hash>``).

``podManagementPolicy: OrderedReady`` (the default) creates ``web-<i>`` only once
``web-0`` .. ``web-<i-1>`` run and are Ready, and scales down from the highest ordinal,
one pod at a time, while the others are healthy; ``Parallel`` creates and deletes at once.
A pod that failed, or was deleted, comes back under the same name. A new template rolls
out (``RollingUpdate``, the default) from the highest ordinal down to
``rollingUpdate.partition``, one pod at a time, each replaced only when every pod is
healthy; ``OnDelete`` leaves the pods until someone deletes them. The planning is pure
(``plan_statefulset``); the controller writes what it says through the API.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import re
from dataclasses import dataclass, field

import orjson

from gpushare.api.objects import Meta, Obj
from gpushare.controllers.events import EventRecorder
from gpushare.controllers.workloads.replicas import owner_reference
from gpushare.controllers.workloads.workload_controllers import _OwnerController
from gpushare.kube.client import PODS, STATEFULSETS, ApiError, KubeClient, Stopper
from gpushare.kube.informers import InformerFactory

log = logging.getLogger(__name__)

POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
REVISION_LABEL = "controller-revision-hash"




def _spec(obj: Obj) -> Obj:
    spec = obj.get("spec")
    return spec if isinstance(spec, dict) else {}


def revision(sts: Obj) -> str:
    """``<name>-<hash of the pod template>``: the update revision pods are labelled with."""
    template = _spec(sts).get("template") or {}
    digest = hashlib.sha256(orjson.dumps(template, option=orjson.OPT_SORT_KEYS)).hexdigest()
    return f"{Meta.of(sts).name}-{digest[:10]}"


def ordinal(sts_name: str, pod: Obj) -> int | None:
    """The ordinal in a pod's name ``<sts>-<n>``; None for a name not of that form."""
    match = re.fullmatch(re.escape(sts_name) + r"-(0|[1-9][0-9]*)", Meta.of(pod).name)
    return int(match.group(1)) if match else None


def healthy(pod: Obj) -> bool:
    status = pod.get("status") or {}
    return (status.get("phase") == "Running" and not Meta.of(pod).deleting
            and any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in status.get("conditions") or [] if isinstance(c, dict)))


def _terminating(pod: Obj) -> bool:
    return Meta.of(pod).deleting


def _failed(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Failed", "Succeeded")


def pod_for(sts: Obj, index: int) -> Obj:
    """The pod ``<sts>-<index>`` from the template."""
    meta, spec = Meta.of(sts), _spec(sts)
    template = copy.deepcopy(spec.get("template") or {})
    tmeta = Meta.of(template)
    name = f"{meta.name}-{index}"
    labels = dict(tmeta.labels)
    labels.update({POD_NAME_LABEL: name, POD_INDEX_LABEL: str(index),
                   REVISION_LABEL: revision(sts)})
    pod_spec = dict(template.get("spec") or {})
    pod_spec["hostname"] = name
    if spec.get("serviceName"):
        pod_spec["subdomain"] = spec["serviceName"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": meta.namespace or "default",
                         "labels": labels, "annotations": dict(tmeta.annotations),
                         "ownerReferences": [owner_reference(sts, "apps/v1", "StatefulSet")]},
            "spec": pod_spec}


@dataclass
class StatefulPlan:
    create: list[Obj] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    status: Obj | None = None


def _replicas(sts: Obj) -> int:
    value = _spec(sts).get("replicas")
    return int(value) if isinstance(value, int) and value >= 0 else 1


def plan_statefulset(sts: Obj, pods: list[Obj]) -> StatefulPlan:
    """What to create and delete now, and the status to write."""
    name = Meta.of(sts).name
    spec = _spec(sts)
    wanted = _replicas(sts)
    ordered = spec.get("podManagementPolicy", "OrderedReady") != "Parallel"
    update = revision(sts)
    by_index: dict[int, Obj] = {}
    for pod in pods:
        i = ordinal(name, pod)
        if i is not None:
            by_index[i] = pod
    plan = StatefulPlan()
    _plan_members(plan, sts, by_index, wanted, ordered)
    if not plan.create and not plan.delete:
        _plan_condemned(plan, by_index, wanted, ordered)
    if not plan.create and not plan.delete:
        _plan_update(plan, sts, by_index, wanted, update)
    plan.status = _status(sts, by_index, plan, update)
    return plan


def _plan_members(plan: StatefulPlan, sts: Obj, by_index: dict[int, Obj], wanted: int,
                  ordered: bool) -> None:
    """Create missing ordinals below `wanted` (in order, one at a time, when ordered) and
    delete failed ones so they come back."""
    for i in range(wanted):
        pod = by_index.get(i)
        if pod is None:
            plan.create.append(pod_for(sts, i))
            if ordered:
                return
            continue
        if _terminating(pod):
            if ordered:
                return
            continue
        if _failed(pod):
            plan.delete.append(Meta.of(pod).name)
            if ordered:
                return
            continue
        if ordered and not healthy(pod):
            return


def _plan_condemned(plan: StatefulPlan, by_index: dict[int, Obj], wanted: int,
                    ordered: bool) -> None:
    """Scale down: the ordinals at or above `wanted`, highest first."""
    condemned = sorted((i for i in by_index if i >= wanted), reverse=True)
    if not condemned:
        return
    if ordered:
        if any(_terminating(by_index[i]) for i in condemned):
            return  # one at a time: the last one is still going
        if not all(healthy(by_index[i]) for i in by_index if i < wanted):
            return
        condemned = condemned[:1]
    plan.delete.extend(Meta.of(by_index[i]).name for i in condemned
                       if not _terminating(by_index[i]))


def _plan_update(plan: StatefulPlan, sts: Obj, by_index: dict[int, Obj], wanted: int,
                 update: str) -> None:
    """Roll a new template: one outdated pod at a time, highest ordinal first, while every
    pod is healthy; not below the partition; nothing under OnDelete."""
    strategy = _spec(sts).get("updateStrategy") or {}
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        return
    partition = int((strategy.get("rollingUpdate") or {}).get("partition") or 0)
    members = [by_index[i] for i in range(wanted) if i in by_index]
    if len(members) < wanted or not all(healthy(p) for p in members):
        return
    for i in range(wanted - 1, partition - 1, -1):
        pod = by_index[i]
        if Meta.of(pod).labels.get(REVISION_LABEL) != update:
            plan.delete.append(Meta.of(pod).name)
            return


def _status(sts: Obj, by_index: dict[int, Obj], plan: StatefulPlan, update: str) -> Obj | None:
    meta = Meta.of(sts)
    current = sts.get("status") or {}
    present = [p for p in by_index.values() if Meta.of(p).name not in plan.delete]
    revisions = [Meta.of(p).labels.get(REVISION_LABEL) for p in present]
    updated = sum(1 for r in revisions if r == update)
    ready = sum(1 for p in present if healthy(p))
    current_revision = current.get("currentRevision") or update
    if updated == len(present) == _replicas(sts):
        current_revision = update
    status = {
        "observedGeneration": meta.generation or 1,
        "replicas": len(present) + len(plan.create),
        "readyReplicas": ready,
        "availableReplicas": ready,
        "currentReplicas": sum(1 for r in revisions if r == current_revision),
        "updatedReplicas": updated,
        "currentRevision": current_revision,
        "updateRevision": update,
        "collisionCount": int(current.get("collisionCount") or 0),
    }
    if all(current.get(k) == v for k, v in status.items()):
        return None
    return {**current, **status}


class StatefulSetController(_OwnerController):
    name = "statefulset-controller"
    owner_kind = "StatefulSet"

    def __init__(self, client: KubeClient, informers: InformerFactory, stopper: Stopper,
                 events: EventRecorder) -> None:
        super().__init__(client, informers, stopper, events, STATEFULSETS, PODS)

    def reconcile(self, key: str) -> None:
        sts = self.owners.get(key)
        if sts is None or Meta.of(sts).deleting:
            return
        meta = Meta.of(sts)
        uid, namespace = meta.uid, meta.namespace or "default"
        plan = plan_statefulset(sts, self.index.of(uid))
        for body in plan.create:
            pod_name = Meta.of(body).name
            try:
                created = self.client.create(PODS.collection(namespace), body)
            except ApiError as error:
                if error.status == 409:
                    continue  # still going from a delete; its DELETED event brings us back
                self.events.emit(sts, "Warning", "FailedCreate",
                                 f"create Pod {pod_name} in StatefulSet {meta.name} "
                                 f"failed error: {error}")
                if error.status not in (403, 422):
                    raise
                continue
            self.index.created(uid, created)
            self.events.emit(sts, "Normal", "SuccessfulCreate",
                             f"create Pod {pod_name} in StatefulSet {meta.name} successful")
        for pod_name in plan.delete:
            try:
                self.client.delete(PODS.item(pod_name, namespace))
            except ApiError as error:
                if error.status != 404:
                    raise
            self.events.emit(sts, "Normal", "SuccessfulDelete",
                             f"delete Pod {pod_name} in StatefulSet {meta.name} successful")
        if plan.status is not None:
            try:
                self.client.merge_patch(STATEFULSETS.item(meta.name, namespace,
                                                          "status"), {"status": plan.status})
            except ApiError as error:
                if error.status != 404:
                    raise
