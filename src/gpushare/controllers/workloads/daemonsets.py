"""The DaemonSet controller, as kube-controller-manager's: one pod on each fitting node.

A node fits a DaemonSet when its labels match the pod template's ``nodeSelector`` and
required node affinity, and the template tolerates every ``NoSchedule``/``NoExecute``
taint on it (besides the tolerations Kubernetes adds to daemon pods: not-ready and
unreachable ``NoExecute``; disk, memory and PID pressure and unschedulable
``NoSchedule``). A node without an agent (``gpushare node add``) runs nothing: it fits only
a template that tolerates ``gpushare.io/no-agent``, whether or not the node carries that
taint.

Each daemon pod is created bound to its node (``spec.nodeName``, with the required
affinity ``matchFields metadata.name`` Kubernetes gives it), named ``<ds>-<random>``,
labelled ``controller-revision-hash`` and ``pod-template-generation``. Pods on nodes that
no longer fit, extra pods on one node, and failed pods are deleted (a failed one comes
back). A new template rolls out (``RollingUpdate``, the default) one node at a time
while the other daemon pods are Ready; ``OnDelete`` waits for a delete. The planning is
pure (``plan_daemonset``).
"""

from __future__ import annotations

import copy
import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any

import orjson

from gpushare.api.contracts import NO_AGENT_TAINT, STATIC_NODE_ANNOTATION
from gpushare.api.objects import Meta, Obj
from gpushare.api.taints import blocking_taints, tolerated
from gpushare.controllers.events import EventRecorder
from gpushare.controllers.workloads.job_controller import random_suffix
from gpushare.controllers.workloads.replicas import owner_reference
from gpushare.controllers.workloads.workload_controllers import _OwnerController
from gpushare.kube.client import NODES, PODS, ApiError, KubeClient, Resource, Stopper
from gpushare.kube.informers import InformerFactory

log = logging.getLogger(__name__)

DAEMONSETS = Resource("apps/v1", "daemonsets", True)
REVISION_LABEL = "controller-revision-hash"
GENERATION_LABEL = "pod-template-generation"
#: What Kubernetes' DaemonSet controller adds to every daemon pod.
DEFAULT_TOLERATIONS = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists",
     "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
)




def _spec(obj: Obj) -> Obj:
    spec = obj.get("spec")
    return spec if isinstance(spec, dict) else {}


def _template_spec(ds: Obj) -> Obj:
    template = _spec(ds).get("template")
    spec = template.get("spec") if isinstance(template, dict) else None
    return spec if isinstance(spec, dict) else {}


def revision(ds: Obj) -> str:
    template = _spec(ds).get("template") or {}
    return hashlib.sha256(orjson.dumps(template, option=orjson.OPT_SORT_KEYS)).hexdigest()[:10]


def _term_matches(term: Obj, node: Obj) -> bool:
    labels = Meta.of(node).labels
    for expr in term.get("matchExpressions") or []:
        if not _expression(expr, labels):
            return False
    for expr in term.get("matchFields") or []:
        if expr.get("key") == "metadata.name" and not _expression(
                expr, {"metadata.name": Meta.of(node).name}):
            return False
    return True


def _expression(expr: Obj, labels: dict[str, Any]) -> bool:
    key, op = str(expr.get("key")), expr.get("operator")
    values = [str(v) for v in expr.get("values") or []]
    present = key in labels
    value = str(labels.get(key, ""))
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not present or value not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and values:
        try:
            have, bound = int(value), int(values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def fits(ds: Obj, node: Obj) -> bool:
    """Whether the DaemonSet wants a pod on `node`."""
    if Meta.of(node).deleting:
        return False
    spec = _template_spec(ds)
    labels = Meta.of(node).labels
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = [t for t in required.get("nodeSelectorTerms") or [] if isinstance(t, dict)]
    if terms and not any(_term_matches(t, node) for t in terms):
        return False
    tolerations = [t for t in spec.get("tolerations") or [] if isinstance(t, dict)]
    tolerations += list(DEFAULT_TOLERATIONS)
    if Meta.of(node).annotations.get(STATIC_NODE_ANNOTATION) == "true" and not \
            any(tolerated(t, (NO_AGENT_TAINT, "true", "NoSchedule")) for t in tolerations):
        return False  # no agent: nothing would run there
    return all(any(tolerated(t, taint) for t in tolerations) for taint in blocking_taints(node))


def pod_for(ds: Obj, node_name: str, suffix: str) -> Obj:
    meta = Meta.of(ds)
    template = copy.deepcopy(_spec(ds).get("template") or {})
    tmeta = Meta.of(template)
    labels = dict(tmeta.labels)
    labels[REVISION_LABEL] = revision(ds)
    labels[GENERATION_LABEL] = str(meta.generation or 1)
    spec = dict(template.get("spec") or {})
    spec["nodeName"] = node_name
    tolerations = list(spec.get("tolerations") or [])
    tolerations += [dict(t) for t in DEFAULT_TOLERATIONS if t not in tolerations]
    spec["tolerations"] = tolerations
    affinity = dict(spec.get("affinity") or {})
    affinity["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                "values": [node_name]}]}]}}
    spec["affinity"] = affinity
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{meta.name}-{suffix}",
                         "namespace": meta.namespace or "default", "labels": labels,
                         "annotations": dict(tmeta.annotations),
                         "ownerReferences": [owner_reference(ds, "apps/v1", "DaemonSet")]},
            "spec": spec}


def _ready(pod: Obj) -> bool:
    return any(isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


@dataclass
class DaemonPlan:
    create: list[Obj] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    status: Obj | None = None


def plan_daemonset(ds: Obj, nodes: list[Obj], pods: list[Obj],
                   new_suffix: Any = random_suffix) -> DaemonPlan:
    plan = DaemonPlan()
    wanted = {Meta.of(n).name for n in nodes if fits(ds, n)}
    on_node: dict[str, list[Obj]] = {}
    for pod in pods:
        if not Meta.of(pod).deleting:
            on_node.setdefault(str(_spec(pod).get("nodeName") or ""), []).append(pod)
    update = revision(ds)
    for node in sorted(wanted):
        mine = on_node.get(node, [])
        failed = [p for p in mine if (p.get("status") or {}).get("phase") == "Failed"]
        plan.delete.extend(Meta.of(p).name for p in failed)
        running = [p for p in mine if p not in failed]
        if not running:
            plan.create.append(pod_for(ds, node, new_suffix()))
        # the oldest stays: extras go
        running.sort(key=lambda p: Meta.of(p).creation_timestamp)
        plan.delete.extend(Meta.of(p).name for p in running[1:])
    for node, mine in on_node.items():
        if node not in wanted:
            plan.delete.extend(Meta.of(p).name for p in mine)
    if not plan.create and not plan.delete:
        _roll(plan, ds, wanted, on_node, update)
    plan.status = _status(ds, wanted, on_node, update)
    return plan


def _roll(plan: DaemonPlan, ds: Obj, wanted: set[str], on_node: dict[str, list[Obj]],
          update: str) -> None:
    strategy = _spec(ds).get("updateStrategy") or {}
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        return
    pods = [p for n in sorted(wanted) for p in on_node.get(n, [])]
    if not all(_ready(p) for p in pods):
        return
    for pod in pods:
        if Meta.of(pod).labels.get(REVISION_LABEL) != update:
            plan.delete.append(Meta.of(pod).name)
            return


def _status(ds: Obj, wanted: set[str], on_node: dict[str, list[Obj]], update: str
            ) -> Obj | None:
    current = ds.get("status") or {}
    scheduled = [n for n in wanted if on_node.get(n)]
    ready = [n for n in scheduled if any(_ready(p) for p in on_node[n])]
    updated = [n for n in scheduled if any(
        Meta.of(p).labels.get(REVISION_LABEL) == update for p in on_node[n])]
    status = {
        "observedGeneration": Meta.of(ds).generation or 1,
        "desiredNumberScheduled": len(wanted),
        "currentNumberScheduled": len(scheduled),
        "numberMisscheduled": sum(1 for n, pods in on_node.items() if n not in wanted and pods),
        "numberReady": len(ready),
        "numberAvailable": len(ready),
        "numberUnavailable": len(wanted) - len(ready),
        "updatedNumberScheduled": len(updated),
    }
    if all(current.get(k) == v for k, v in status.items()):
        return None
    return {**current, **status}


class DaemonSetController(_OwnerController):
    name = "daemonset-controller"
    owner_kind = "DaemonSet"

    def __init__(self, client: KubeClient, informers: InformerFactory, stopper: Stopper,
                 events: EventRecorder) -> None:
        super().__init__(client, informers, stopper, events, DAEMONSETS, PODS)
        self.nodes = informers.get(NODES)
        self.nodes.add_handler(self._on_node)

    def _on_node(self, event: str, node: Obj, old: Obj | None) -> None:
        if old is not None and event != "DELETED" and (
                Meta.of(old).labels, _spec(old).get("taints"),
                Meta.of(old).annotations.get(STATIC_NODE_ANNOTATION)) == (
                Meta.of(node).labels, _spec(node).get("taints"),
                Meta.of(node).annotations.get(STATIC_NODE_ANNOTATION)):
            return  # a heartbeat: nothing a DaemonSet looks at
        for ds in self.owners.items():
            self.queue.add(f"{Meta.of(ds).namespace}/{Meta.of(ds).name}")

    def reconcile(self, key: str) -> None:
        ds = self.owners.get(key)
        if ds is None or Meta.of(ds).deleting:
            return
        meta = Meta.of(ds)
        uid, namespace = meta.uid, meta.namespace or "default"
        plan = plan_daemonset(ds, self.nodes.items(), self.index.of(uid))
        for body in plan.create:
            node = body["spec"]["nodeName"]
            try:
                created = self.client.create(PODS.collection(namespace), body)
            except ApiError as error:
                self.events.emit(ds, "Warning", "FailedCreate",
                                 f"Error creating: {error}")
                if error.status not in (403, 409, 422):
                    raise
                continue
            self.index.created(uid, created)
            self.events.emit(ds, "Normal", "SuccessfulCreate",
                             f"Created pod: {Meta.of(body).name} on node {node}")
        for name in plan.delete:
            try:
                self.client.delete(PODS.item(name, namespace))
            except ApiError as error:
                if error.status != 404:
                    raise
            self.events.emit(ds, "Normal", "SuccessfulDelete", f"Deleted pod: {name}")
        if plan.status is not None:
            try:
                self.client.merge_patch(DAEMONSETS.item(meta.name, namespace, "status"),
                                        {"status": plan.status})
            except ApiError as error:
                if error.status != 404:
                    raise
