"""ReplicaSet and Deployment rules, as pure functions.

A ReplicaSet keeps ``replicas`` live pods from its template. A Deployment owns one
ReplicaSet per pod template (named by the template's hash, like Kubernetes'
``pod-template-hash``); when the template changes, the new ReplicaSet gets the replicas
and the old ones are scaled to zero.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, field
from typing import Any

import orjson

Obj = dict[str, Any]
TEMPLATE_HASH_LABEL = "pod-template-hash"


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def _live(pod: Obj) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not _meta(pod).get("deletionTimestamp")


def _ready(pod: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def owner_reference(obj: Obj, api_version: str, kind: str) -> Obj:
    meta = _meta(obj)
    return {"apiVersion": api_version, "kind": kind, "name": meta.get("name", ""),
            "uid": meta.get("uid", ""), "controller": True, "blockOwnerDeletion": True}


@dataclass(slots=True)
class ReplicaPlan:
    create: list[Obj] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    status: Obj | None = None


def plan_replicaset(rs: Obj, pods: list[Obj], new_suffix: Any) -> ReplicaPlan:
    """Pods to create or delete so that ``spec.replicas`` live pods exist, and the status."""
    plan = ReplicaPlan()
    meta, spec = _meta(rs), rs.get("spec") or {}
    wanted = int(spec.get("replicas", 1) if spec.get("replicas") is not None else 1)
    live = [p for p in pods if _live(p)]
    if len(live) < wanted:
        for _ in range(wanted - len(live)):
            plan.create.append(_pod_from_template(rs, f"{meta.get('name')}-{new_suffix()}"))
    elif len(live) > wanted:
        # Unplaced pods go first, then the youngest: they have done the least work.
        order = sorted(live, key=lambda p: (
            bool((p.get("spec") or {}).get("nodeName")),
            _ready(p),
            -_created(p),
        ))
        plan.delete = [str(_meta(p).get("name")) for p in order[: len(live) - wanted]]
    remaining = len(live) + len(plan.create) - len(plan.delete)
    ready = sum(1 for p in live if _ready(p) and str(_meta(p).get("name")) not in plan.delete)
    status = {
        "replicas": remaining,
        "fullyLabeledReplicas": remaining,
        "readyReplicas": ready,
        "availableReplicas": ready,
        "observedGeneration": int(meta.get("generation") or 1),
    }
    current = rs.get("status") or {}
    if any(current.get(k) != v for k, v in status.items()):
        plan.status = {**current, **status}
    return plan


def _created(pod: Obj) -> float:
    from gpushare.controllers.translate import timestamp

    return timestamp(_meta(pod).get("creationTimestamp"))


def _pod_from_template(rs: Obj, name: str) -> Obj:
    meta, spec = _meta(rs), rs.get("spec") or {}
    template = copy.deepcopy(spec.get("template") or {})
    tmeta = template.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": meta.get("namespace", "default"),
            "labels": dict(tmeta.get("labels") or {}),
            "annotations": dict(tmeta.get("annotations") or {}),
            "ownerReferences": [owner_reference(rs, "apps/v1", "ReplicaSet")],
        },
        "spec": template.get("spec") or {},
    }


def template_hash(template: Obj) -> str:
    """A short, stable name for a pod template."""
    digest = hashlib.sha256(orjson.dumps(template, option=orjson.OPT_SORT_KEYS)).hexdigest()
    return digest[:10]


@dataclass(slots=True)
class DeploymentPlan:
    create: Obj | None = None  # the ReplicaSet of the current template, when missing
    scale: dict[str, int] = field(default_factory=dict)  # ReplicaSet name -> replicas
    status: Obj | None = None


def plan_deployment(deployment: Obj, replicasets: list[Obj]) -> DeploymentPlan:
    """The current template's ReplicaSet gets every replica; older ones get none."""
    plan = DeploymentPlan()
    meta, spec = _meta(deployment), deployment.get("spec") or {}
    wanted = int(spec.get("replicas", 1) if spec.get("replicas") is not None else 1)
    template = spec.get("template") or {}
    digest = template_hash(template)
    name = f"{meta.get('name')}-{digest}"
    current = next((rs for rs in replicasets if _meta(rs).get("name") == name), None)
    if current is None:
        labels = dict((template.get("metadata") or {}).get("labels") or {})
        labels[TEMPLATE_HASH_LABEL] = digest
        new_template = copy.deepcopy(template)
        new_template.setdefault("metadata", {})["labels"] = labels
        selector = copy.deepcopy(spec.get("selector") or {})
        selector.setdefault("matchLabels", {})[TEMPLATE_HASH_LABEL] = digest
        plan.create = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": name,
                "namespace": meta.get("namespace", "default"),
                "labels": labels,
                "ownerReferences": [owner_reference(deployment, "apps/v1", "Deployment")],
            },
            "spec": {"replicas": wanted, "selector": selector, "template": new_template},
        }
    elif int((current.get("spec") or {}).get("replicas", 1)) != wanted:
        plan.scale[name] = wanted
    for rs in replicasets:
        rs_name = str(_meta(rs).get("name"))
        if rs_name != name and int((rs.get("spec") or {}).get("replicas", 0) or 0) != 0:
            plan.scale[rs_name] = 0
    totals = {"replicas": 0, "readyReplicas": 0, "availableReplicas": 0}
    for rs in replicasets:
        rs_status = rs.get("status") or {}
        for key in totals:
            totals[key] += int(rs_status.get(key) or 0)
    updated = int(((current or {}).get("status") or {}).get("replicas") or 0)
    available = totals["availableReplicas"]
    status = {
        "observedGeneration": int(meta.get("generation") or 1),
        "replicas": totals["replicas"],
        "updatedReplicas": updated,
        "readyReplicas": totals["readyReplicas"],
        "availableReplicas": available,
        "unavailableReplicas": max(wanted - available, 0),
    }
    condition = {
        "type": "Available",
        "status": "True" if available >= wanted else "False",
        "reason": "MinimumReplicasAvailable" if available >= wanted
        else "MinimumReplicasUnavailable",
        "message": f"{available} of {wanted} replicas available",
    }
    old = deployment.get("status") or {}
    old_conditions = [c for c in old.get("conditions") or [] if c.get("type") == "Available"]
    changed = any(old.get(k) != v for k, v in status.items()) or not old_conditions or any(
        old_conditions[0].get(k) != v for k, v in condition.items()
    )
    if changed:
        plan.status = {**old, **status, "conditions": [condition]}
    return plan
