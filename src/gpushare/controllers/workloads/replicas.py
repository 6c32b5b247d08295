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

from gpushare.api.objects import Meta, Obj
from gpushare.api.timefmt import rfc3339

TEMPLATE_HASH_LABEL = "pod-template-hash"


def _live(pod: Obj) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not Meta.of(pod).deleting


def _ready(pod: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def owner_reference(obj: Obj, api_version: str, kind: str) -> Obj:
    meta = Meta.of(obj)
    return {"apiVersion": api_version, "kind": kind, "name": meta.name,
            "uid": meta.uid, "controller": True, "blockOwnerDeletion": True}


@dataclass(slots=True)
class ReplicaPlan:
    create: list[Obj] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    status: Obj | None = None


def plan_replicaset(rs: Obj, pods: list[Obj], new_suffix: Any,
                    owner: tuple[str, str] = ("apps/v1", "ReplicaSet")) -> ReplicaPlan:
    """Pods to create or delete so that ``spec.replicas`` live pods exist, and the status.
    ``owner`` is the (apiVersion, kind) the pods' owner reference names (a
    ReplicationController keeps pods the same way)."""
    plan = ReplicaPlan()
    meta, spec = Meta.of(rs), rs.get("spec") or {}
    wanted = int(spec.get("replicas", 1) if spec.get("replicas") is not None else 1)
    live = [p for p in pods if _live(p)]
    if len(live) < wanted:
        for _ in range(wanted - len(live)):
            plan.create.append(_pod_from_template(rs, f"{meta.name}-{new_suffix()}",
                                                  owner))
    elif len(live) > wanted:
        # Unplaced pods go first, then the youngest: they have done the least work.
        order = sorted(live, key=lambda p: (
            bool((p.get("spec") or {}).get("nodeName")),
            _ready(p),
            -_created(p),
        ))
        plan.delete = [Meta.of(p).name for p in order[: len(live) - wanted]]
    remaining = len(live) + len(plan.create) - len(plan.delete)
    ready = sum(1 for p in live if _ready(p) and Meta.of(p).name not in plan.delete)
    status = {
        "replicas": remaining,
        "fullyLabeledReplicas": remaining,
        "readyReplicas": ready,
        "availableReplicas": ready,
        "observedGeneration": meta.generation or 1,
    }
    current = rs.get("status") or {}
    if any(current.get(k) != v for k, v in status.items()):
        plan.status = {**current, **status}
    return plan


REPLICA_FAILURE = "ReplicaFailure"


def with_replica_failure(status: Obj, message: str | None, now: str) -> Obj:
    """The status with the ``ReplicaFailure`` condition set (a pod could not be created:
    ``FailedCreate`` and the API's message, e.g. an exceeded quota) or cleared (None)."""
    kept = [c for c in status.get("conditions") or [] if c.get("type") != REPLICA_FAILURE]
    if message is not None:
        previous = next((c for c in status.get("conditions") or []
                         if c.get("type") == REPLICA_FAILURE), None)
        kept.append({"type": REPLICA_FAILURE, "status": "True", "reason": "FailedCreate",
                     "message": message,
                     "lastTransitionTime": (previous or {}).get("lastTransitionTime", now)})
    out = {**status, "conditions": kept}
    if not kept:
        out.pop("conditions")
    return out


def _created(pod: Obj) -> float:
    from gpushare.api.timefmt import timestamp

    return timestamp(Meta.of(pod).creation_timestamp)


def _pod_from_template(rs: Obj, name: str, owner: tuple[str, str]) -> Obj:
    meta, spec = Meta.of(rs), rs.get("spec") or {}
    template = copy.deepcopy(spec.get("template") or {})
    tmeta = Meta.of(template)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": meta.namespace or "default",
            "labels": dict(tmeta.labels),
            "annotations": dict(tmeta.annotations),
            "ownerReferences": [owner_reference(rs, *owner)],
        },
        "spec": template.get("spec") or {},
    }


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def template_hash(template: Obj) -> str:
    """A short, stable name for a pod template. A null field counts as absent, as in
    Kubernetes' own hash (``kubectl rollout undo`` sends ``creationTimestamp: null``)."""
    digest = hashlib.sha256(orjson.dumps(_without_nulls(template),
                                         option=orjson.OPT_SORT_KEYS)).hexdigest()
    return digest[:10]


REVISION_ANNOTATION = "deployment.kubernetes.io/revision"
CHANGE_CAUSE_ANNOTATION = "kubernetes.io/change-cause"


def _replicas(obj: Obj, default: int = 1) -> int:
    value = (obj.get("spec") or {}).get("replicas")
    try:
        return int(value) if value is not None else default
    except (TypeError, ValueError):
        return default


def _revision(rs: Obj) -> int:
    try:
        return int((Meta.of(rs).annotations).get(REVISION_ANNOTATION, "0"))
    except (TypeError, ValueError):
        return 0


def _int_or_percent(value: Any, total: int, round_up: bool, default: str) -> int:
    """``maxSurge`` / ``maxUnavailable``: an integer or a percentage of ``total``."""
    if value is None:
        value = default
    if isinstance(value, str) and value.endswith("%"):
        try:
            percent = float(value[:-1])
        except ValueError:
            percent = float(default[:-1])
        scaled = percent * total / 100
        return int(-(-scaled // 1)) if round_up else int(scaled // 1)
    try:
        return max(int(value), 0)
    except (TypeError, ValueError):
        return _int_or_percent(default, total, round_up, default)


def rolling_bounds(deployment: Obj, wanted: int) -> tuple[int, int]:
    """(maxSurge, maxUnavailable) in pods, as Kubernetes resolves them: the surge rounds
    up, the unavailable rounds down, and both zero means one unavailable."""
    rolling = ((deployment.get("spec") or {}).get("strategy") or {}).get("rollingUpdate") or {}
    surge = _int_or_percent(rolling.get("maxSurge"), wanted, True, "25%")
    unavailable = _int_or_percent(rolling.get("maxUnavailable"), wanted, False, "25%")
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def _new_replicaset(deployment: Obj, name: str, digest: str, replicas: int,
                    revision: int) -> Obj:
    meta, spec = Meta.of(deployment), deployment.get("spec") or {}
    template = spec.get("template") or {}
    labels = dict(Meta.of(template).labels)
    labels[TEMPLATE_HASH_LABEL] = digest
    new_template = copy.deepcopy(template)
    new_template.setdefault("metadata", {})["labels"] = labels
    selector = copy.deepcopy(spec.get("selector") or {})
    selector.setdefault("matchLabels", {})[TEMPLATE_HASH_LABEL] = digest
    annotations = {REVISION_ANNOTATION: str(revision)}
    cause = meta.annotations.get(CHANGE_CAUSE_ANNOTATION)
    if cause:
        annotations[CHANGE_CAUSE_ANNOTATION] = cause
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": name,
            "namespace": meta.namespace or "default",
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(deployment, "apps/v1", "Deployment")],
        },
        "spec": {"replicas": replicas, "selector": selector, "template": new_template},
    }


@dataclass(slots=True)
class DeploymentPlan:
    create: Obj | None = None  # the ReplicaSet of the current template, when missing
    scale: dict[str, int] = field(default_factory=dict)  # ReplicaSet name -> replicas
    #: ReplicaSet name -> annotations to merge (its revision, when a rollback reuses it)
    annotate: dict[str, dict[str, str]] = field(default_factory=dict)
    #: annotations to merge on the Deployment (its current revision)
    deployment_annotations: dict[str, str] = field(default_factory=dict)
    status: Obj | None = None
    #: seconds after which to look again (the progress deadline of an unfinished rollout)
    recheck_after: float | None = None


DESIRED_ANNOTATION = "deployment.kubernetes.io/desired-replicas"
MAX_ANNOTATION = "deployment.kubernetes.io/max-replicas"
DEFAULT_PROGRESS_DEADLINE = 600


def _annotation_int(rs: Obj, key: str) -> int | None:
    try:
        return int((Meta.of(rs).annotations)[key])
    except (KeyError, TypeError, ValueError):
        return None


def _proportional_scale(active: list[Obj], wanted: int, allowed: int,
                        before: int) -> dict[str, int] | None:
    """New sizes when the Deployment is resized while several ReplicaSets hold pods (a
    rollout in progress): like Kubernetes, the ``replicas + maxSurge`` pods allowed are
    shared in proportion to each ReplicaSet's size, against the ``max-replicas`` it was
    last sized for; what rounding leaves over goes to the largest one (the newest first
    when growing, the oldest first when shrinking). None when this is no resize."""
    if len(active) < 2 or not any(
            _annotation_int(rs, DESIRED_ANNOTATION) not in (None, wanted) for rs in active):
        return None
    total = sum(_replicas(rs, 0) for rs in active)
    to_add = allowed - total
    if to_add == 0:
        return None
    newest_first = to_add > 0
    order = sorted(active, key=lambda rs: (-_replicas(rs, 0),
                                           -_created(rs) if newest_first else _created(rs)))
    sizes: dict[str, int] = {}
    added = 0
    for rs in order:
        have = _replicas(rs, 0)
        sized_for = _annotation_int(rs, MAX_ANNOTATION) or before
        share = round(have * allowed / sized_for) - have if sized_for > 0 else 0
        remaining = to_add - added
        share = min(share, remaining) if to_add > 0 else max(share, remaining)
        sizes[Meta.of(rs).name] = have + share
        added += share
    first = Meta.of(order[0]).name
    sizes[first] += to_add - added
    return {name: max(size, 0) for name, size in sizes.items()}


def plan_deployment(deployment: Obj, replicasets: list[Obj],
                    now: float | None = None) -> DeploymentPlan:
    """One step of a rollout, as kube-controller-manager's Deployment controller takes it.

    The current template's ReplicaSet (named by its hash) is the new one; the others are
    old. ``Recreate`` scales the old ones to zero and starts the new one once their pods
    are gone. ``RollingUpdate`` (the default) grows the new one while the total stays
    within ``replicas + maxSurge`` and shrinks old ones only while ``replicas -
    maxUnavailable`` pods stay available; a resize in the middle of a rollout is shared
    among the ReplicaSets in proportion to their sizes. Each ReplicaSet carries its
    ``deployment.kubernetes.io/revision`` (a template used again, as by ``kubectl rollout
    undo``, gets the next one) and the Deployment carries its current one. A rollout that
    makes no progress for ``progressDeadlineSeconds`` gets ``Progressing=False`` with
    reason ``ProgressDeadlineExceeded``. ``now`` is the wall clock (epoch seconds)."""
    plan = DeploymentPlan()
    meta, spec = Meta.of(deployment), deployment.get("spec") or {}
    wanted = _replicas(deployment)
    template = spec.get("template") or {}
    digest = template_hash(template)
    name = f"{meta.name}-{digest}"
    current = next((rs for rs in replicasets if Meta.of(rs).name == name), None)
    olds = sorted((rs for rs in replicasets if Meta.of(rs).name != name),
                  key=lambda rs: (_revision(rs), _created(rs)))
    top = max((_revision(rs) for rs in olds), default=0)
    revision = _revision(current) if current is not None else 0
    if revision <= top or revision == 0:
        revision = top + 1  # a new template, or an old one used again (rollout undo)
    if current is not None and _revision(current) != revision:
        plan.annotate[name] = {REVISION_ANNOTATION: str(revision)}
    if meta.annotations.get(REVISION_ANNOTATION) != str(revision):
        plan.deployment_annotations[REVISION_ANNOTATION] = str(revision)

    strategy = str((spec.get("strategy") or {}).get("type") or "RollingUpdate")
    new_spec = _replicas(current, 0) if current is not None else 0
    target_new = new_spec
    if strategy == "Recreate":
        target_new = _plan_recreate(plan, olds, wanted, new_spec)
    else:
        surge, _ = rolling_bounds(deployment, wanted)
        active = [rs for rs in replicasets if _replicas(rs, 0) > 0]
        before = int((deployment.get("status") or {}).get("replicas") or 0)
        resized = _proportional_scale(active, wanted, wanted + surge, before)
        if resized is not None:
            plan.scale.update({n: r for n, r in resized.items() if n != name})
            target_new = resized.get(name, new_spec)
        else:
            target_new = _plan_rolling(plan, deployment, current, olds, wanted, new_spec)
        _size_annotations(plan, replicasets, name, target_new, wanted, wanted + surge)
    if current is None:
        plan.create = _new_replicaset(deployment, name, digest, target_new, revision)
        if strategy != "Recreate":
            plan.create["metadata"]["annotations"].update(
                plan.annotate.pop(name, {}))
    elif target_new != new_spec:
        plan.scale[name] = target_new
    _plan_status(plan, deployment, replicasets, current, name, wanted, strategy, now)
    return plan


def _plan_recreate(plan: DeploymentPlan, olds: list[Obj], wanted: int, new_spec: int) -> int:
    for rs in olds:
        if _replicas(rs, 0):
            plan.scale[Meta.of(rs).name] = 0
    old_total = sum(_replicas(rs, 0) for rs in olds)
    old_pods = sum(int((rs.get("status") or {}).get("replicas") or 0) for rs in olds)
    return wanted if old_total == 0 and old_pods == 0 else new_spec


def _plan_rolling(plan: DeploymentPlan, deployment: Obj, current: Obj | None,
                  olds: list[Obj], wanted: int, new_spec: int) -> int:
    surge, unavailable = rolling_bounds(deployment, wanted)
    old_total = sum(_replicas(rs, 0) for rs in olds)
    if not olds or old_total == 0 or new_spec > wanted:
        target_new = wanted
    else:
        room = wanted + surge - (new_spec + old_total)
        target_new = new_spec + max(min(room, wanted - new_spec), 0)
    # Old ones shrink only as far as the available floor allows.
    new_available = int(((current or {}).get("status") or {}).get("availableReplicas") or 0)
    new_unavailable = max(target_new - new_available, 0) if current is not None \
        else target_new
    remove = (target_new + old_total) - (wanted - unavailable) - new_unavailable
    for rs in olds:
        if remove <= 0:
            break
        have = _replicas(rs, 0)
        if have == 0:
            continue
        cut = min(have, remove)
        plan.scale[Meta.of(rs).name] = have - cut
        remove -= cut
    return target_new


def _size_annotations(plan: DeploymentPlan, replicasets: list[Obj], name: str,
                      target_new: int, wanted: int, allowed: int) -> None:
    """The size each ReplicaSet holding pods was last given for (``desired-replicas``,
    ``max-replicas``), which tells a later resize from a rollout step."""
    notes = {DESIRED_ANNOTATION: str(wanted), MAX_ANNOTATION: str(allowed)}
    for rs in replicasets:
        rs_name = Meta.of(rs).name
        size = target_new if rs_name == name else plan.scale.get(rs_name, _replicas(rs, 0))
        have = Meta.of(rs).annotations
        if size > 0 and any(have.get(k) != v for k, v in notes.items()):
            plan.annotate.setdefault(rs_name, {}).update(notes)
    if not any(Meta.of(rs).name == name for rs in replicasets):
        plan.annotate.setdefault(name, {}).update(notes)


def _progressed(old: Obj, status: Obj) -> bool:
    """Kubernetes' notion of progress: more updated, ready or available pods, or fewer
    pods of old templates."""
    def count(obj: Obj, key: str) -> int:
        return int(obj.get(key) or 0)

    old_stale = count(old, "replicas") - count(old, "updatedReplicas")
    new_stale = count(status, "replicas") - count(status, "updatedReplicas")
    return (count(status, "updatedReplicas") > count(old, "updatedReplicas")
            or new_stale < old_stale
            or count(status, "readyReplicas") > count(old, "readyReplicas")
            or count(status, "availableReplicas") > count(old, "availableReplicas"))


def _progress_condition(plan: DeploymentPlan, deployment: Obj, status: Obj, done: bool,
                        name: str, created: bool, now: float) -> Obj:
    """The ``Progressing`` condition: its ``lastUpdateTime`` moves whenever the rollout
    progresses; past ``progressDeadlineSeconds`` without progress it turns False."""
    old = deployment.get("status") or {}
    previous = next((c for c in old.get("conditions") or [] if c.get("type") == "Progressing"),
                    None)
    deadline = (deployment.get("spec") or {}).get("progressDeadlineSeconds")
    deadline = DEFAULT_PROGRESS_DEADLINE if deadline is None else int(deadline)
    stamp = rfc3339(now)
    if done:
        condition = {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable",
                     "message": f'ReplicaSet "{name}" has successfully progressed.'}
    elif previous is None or created or plan.scale or _progressed(old, status):
        condition = {"type": "Progressing", "status": "True",
                     "reason": "NewReplicaSetCreated" if created else "ReplicaSetUpdated",
                     "message": f'Created new replica set "{name}"' if created
                     else f'ReplicaSet "{name}" is progressing.'}
    else:
        from gpushare.api.timefmt import timestamp

        last = timestamp(previous.get("lastUpdateTime")) or now
        if previous.get("reason") == "ProgressDeadlineExceeded":
            return {**previous}
        if now >= last + deadline:
            condition = {"type": "Progressing", "status": "False",
                         "reason": "ProgressDeadlineExceeded",
                         "message": f'ReplicaSet "{name}" has timed out progressing.'}
        else:
            plan.recheck_after = last + deadline - now + 0.5
            return {**previous}
    before: Obj = previous or {}
    same = previous is not None and all(before.get(k) == v for k, v in condition.items())
    if same and condition["reason"] == "NewReplicaSetAvailable":
        return {**before}
    changed_status = before.get("status") != condition["status"]
    condition["lastUpdateTime"] = stamp
    condition["lastTransitionTime"] = stamp if changed_status else before.get(
        "lastTransitionTime", stamp)
    if condition["status"] == "True" and not done:
        plan.recheck_after = deadline + 0.5
    return condition


def _plan_status(plan: DeploymentPlan, deployment: Obj, replicasets: list[Obj],
                 current: Obj | None, name: str, wanted: int, strategy: str,
                 now: float | None) -> None:
    import time

    meta = Meta.of(deployment)
    totals = {"replicas": 0, "readyReplicas": 0, "availableReplicas": 0}
    for rs in replicasets:
        rs_status = rs.get("status") or {}
        for key in totals:
            totals[key] += int(rs_status.get(key) or 0)
    updated = int(((current or {}).get("status") or {}).get("replicas") or 0)
    available = totals["availableReplicas"]
    status = {
        "observedGeneration": meta.generation or 1,
        "replicas": totals["replicas"],
        "updatedReplicas": updated,
        "readyReplicas": totals["readyReplicas"],
        "availableReplicas": available,
        "unavailableReplicas": max(totals["replicas"] - available, 0),
    }
    floor = wanted - (rolling_bounds(deployment, wanted)[1] if strategy != "Recreate" else wanted)
    old = deployment.get("status") or {}
    old_conditions = {c.get("type"): c for c in old.get("conditions") or []}
    available_condition = {
        "type": "Available",
        "status": "True" if available >= floor else "False",
        "reason": "MinimumReplicasAvailable" if available >= floor
        else "MinimumReplicasUnavailable",
        "message": "Deployment has minimum availability." if available >= floor
        else "Deployment does not have minimum availability.",
    }
    clock = time.time() if now is None else now
    previous = old_conditions.get("Available")
    if previous is not None and previous.get("status") == available_condition["status"]:
        available_condition["lastTransitionTime"] = previous.get("lastTransitionTime")
        available_condition["lastUpdateTime"] = previous.get("lastUpdateTime")
    else:
        available_condition["lastTransitionTime"] = rfc3339(clock)
        available_condition["lastUpdateTime"] = rfc3339(clock)
    done = (updated == wanted and totals["replicas"] == wanted and available >= wanted
            and current is not None)
    progressing = _progress_condition(plan, deployment, status, done, name,
                                      plan.create is not None, clock)
    conditions = [available_condition, progressing]
    changed = any(old.get(k) != v for k, v in status.items()) or any(
        any((old_conditions.get(c["type"]) or {}).get(k) != v for k, v in c.items())
        for c in conditions
    )
    if changed:
        plan.status = {**old, **status, "conditions": conditions}
