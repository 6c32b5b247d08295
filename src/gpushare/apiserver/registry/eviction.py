"""`POST .../pods/<name>/eviction`: a delete that honours the pod's PodDisruptionBudget.

As Kubernetes' eviction subresource: a pod that is not running (Pending, Succeeded,
Failed) or already being deleted goes without a look at budgets; a pod with no budget
goes; with more than one, 500. With one budget:

* its status not yet processed for its generation: 429, cause ``The disruption budget
  <name> is still being processed by the server.``;
* ``disruptionsAllowed`` 0: 429 ``Cannot evict pod as it would violate the pod's
  disruption budget.`` with cause ``The disruption budget <name> needs <desired> healthy
  pods and has <current> currently`` (kubectl drain waits and retries on 429);
* else the eviction takes one allowed disruption (``disruptionsAllowed`` − 1, the pod
  under ``disruptedPods`` until the disruption controller sees it gone) and deletes the pod.

An unready pod is evicted without taking from the budget when the budget's
``unhealthyPodEvictionPolicy`` is ``AlwaysAllow``, or (``IfHealthyBudget``, the default)
when the budget has the healthy pods it wants.
"""

from __future__ import annotations

from typing import Any, Protocol

from gpushare.api.objects import field_dict, field_list, selector_matches
from gpushare.apiserver.errors import ApiError
from gpushare.apiserver.objects import deep_copy, now_rfc3339
from gpushare.apiserver.resources import Registry, ResourceInfo
from gpushare.apiserver.storage.store import Store

PDB_GR = "policy/poddisruptionbudgets"
CAUSE = "DisruptionBudget"
VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget."


class Api(Protocol):
    """What the eviction needs of `registry.api.Api` (which calls it): the store, the
    served resources, and the status update that records a disruption."""

    store: Store

    def registry(self, cluster: str) -> Registry: ...

    def update(self, cluster: str, info: ResourceInfo, ns: str, name: str, body: Any,
               subresource: str | None = None) -> dict[str, Any]: ...


def _too_many(message: str, cause: str, retry_after: int) -> ApiError:
    return ApiError(429, message, "TooManyRequests", {
        "causes": [{"reason": CAUSE, "message": cause}],
        "retryAfterSeconds": retry_after})


def _ready(pod: dict[str, Any]) -> bool:
    return any(isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
               for c in field_list(field_dict(pod, "status"), "conditions"))


def budget_for(api: Api, cluster: str, pod: dict[str, Any]) -> dict[str, Any] | None:
    """The one PodDisruptionBudget that selects `pod`; None for none; 500 for several."""
    m = field_dict(pod, "metadata")
    labels = field_dict(m, "labels")
    found = [p for p in api.store.list(cluster, PDB_GR, str(m.get("namespace") or ""))
             if selector_matches(field_dict(p, "spec").get("selector"), labels)]
    if len(found) > 1:
        raise ApiError(500, "This pod has more than one PodDisruptionBudget, which the "
                            "eviction subresource does not support.", "InternalError")
    return found[0] if found else None


def take_disruption(api: Api, cluster: str, pod: dict[str, Any], dry_run: bool) -> None:
    """Refuse the eviction of `pod` (429, 403, 500) or record the disruption it takes."""
    m = field_dict(pod, "metadata")
    phase = field_dict(pod, "status").get("phase")
    if m.get("deletionTimestamp") or phase in ("Pending", "Succeeded", "Failed"):
        return
    pdb = budget_for(api, cluster, pod)
    if pdb is None:
        return
    name = str(field_dict(pdb, "metadata").get("name"))
    spec, status = field_dict(pdb, "spec"), field_dict(pdb, "status")
    generation = int(field_dict(pdb, "metadata").get("generation") or 1)
    processed = int(status.get("observedGeneration") or 0) >= generation
    healthy, desired = int(status.get("currentHealthy") or 0), int(
        status.get("desiredHealthy") or 0)
    if not _ready(pod):
        policy = spec.get("unhealthyPodEvictionPolicy") or "IfHealthyBudget"
        if policy == "AlwaysAllow" or (processed and desired > 0 and healthy >= desired):
            return
    if not processed:
        raise _too_many(VIOLATION, f"The disruption budget {name} is still being processed "
                                   "by the server.", 10)
    allowed = int(status.get("disruptionsAllowed") or 0)
    if allowed < 0:
        raise ApiError(403, f'poddisruptionbudgets.policy "{name}" is forbidden: pdb '
                            "disruptions allowed is negative", "Forbidden")
    if allowed == 0:
        raise _too_many(VIOLATION, f"The disruption budget {name} needs {desired} healthy "
                                   f"pods and has {healthy} currently", 0)
    if dry_run:
        return
    _record(api, cluster, pdb, str(m.get("name")), allowed - 1)


def _record(api: Api, cluster: str, pdb: dict[str, Any], pod_name: str, allowed: int) -> None:
    now = now_rfc3339()
    updated = deep_copy(pdb)
    status = updated.setdefault("status", {})
    status["disruptionsAllowed"] = allowed
    disrupted = status.get("disruptedPods")
    status["disruptedPods"] = {**(disrupted if isinstance(disrupted, dict) else {}),
                               pod_name: now}
    if allowed == 0:
        conditions = [c for c in field_list(status, "conditions")
                      if isinstance(c, dict) and c.get("type") != "DisruptionAllowed"]
        conditions.append({"type": "DisruptionAllowed", "status": "False",
                           "reason": "InsufficientPods", "message": "",
                           "observedGeneration": status.get("observedGeneration", 1),
                           "lastTransitionTime": now})
        status["conditions"] = conditions
    info = api.registry(cluster).get("policy", "v1", "poddisruptionbudgets")
    if info is None:
        return
    m = updated["metadata"]
    api.update(cluster, info, str(m.get("namespace") or ""), str(m["name"]), updated,
               "status")
