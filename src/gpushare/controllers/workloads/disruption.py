"""PodDisruptionBudget status, as kube-controller-manager's disruption controller keeps it.

For each PodDisruptionBudget: the pods its selector matches in its namespace (live, not
being deleted) are the expected pods, the Ready ones the healthy; ``minAvailable`` (a
number, or a percentage of the expected pods, rounded up) or ``expected -
maxUnavailable`` is the desired number of healthy pods; ``disruptionsAllowed`` is what the
healthy exceed that by, with the ``DisruptionAllowed`` condition. ``observedGeneration``
says the spec was seen. Other status fields (``disruptedPods``) are left as written.
"""

from __future__ import annotations

import math
import threading
from typing import Any

from gpushare.api.objects import Meta, Obj, metadata
from gpushare.controllers.events import now_rfc3339
from gpushare.kube.client import PODS, ApiError, KubeClient, Resource, Stopper
from gpushare.kube.informer import WorkQueue, start_workers
from gpushare.kube.informers import InformerFactory

PDBS = Resource("policy/v1", "poddisruptionbudgets", True)
WORKERS = 1


def selects(selector: Any, labels: dict[str, str]) -> bool:
    """A LabelSelector (matchLabels, matchExpressions); an empty or missing one selects
    nothing, as for a PodDisruptionBudget."""
    if not isinstance(selector, dict) or not (selector.get("matchLabels")
                                              or selector.get("matchExpressions")):
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op = expr.get("key"), expr.get("operator")
        values = expr.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True


def _count(value: Any, expected: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        try:
            return math.ceil(float(value[:-1]) * expected / 100)
        except ValueError:
            return 0
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def pdb_status(pdb: Obj, pods: list[Obj], now: str) -> Obj:
    """The status the controller wants (merged over what is there)."""
    meta, spec = metadata(pdb), pdb.get("spec") or {}
    mine = [p for p in pods if metadata(p).get("namespace") == meta.get("namespace")
            and not metadata(p).get("deletionTimestamp")
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            and selects(spec.get("selector"), Meta.of(p).labels)]
    expected = len(mine)
    healthy = sum(1 for p in mine if any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (p.get("status") or {}).get("conditions") or []))
    if spec.get("minAvailable") is not None:
        desired = _count(spec["minAvailable"], expected)
    elif spec.get("maxUnavailable") is not None:
        desired = max(expected - _count(spec["maxUnavailable"], expected), 0)
    else:
        desired = 0
    allowed = max(healthy - desired, 0)
    current = pdb.get("status") or {}
    before: dict[str, Any] = next((c for c in current.get("conditions") or []
                   if c.get("type") == "DisruptionAllowed"), {})
    condition = {"type": "DisruptionAllowed", "status": "True" if allowed else "False",
                 "reason": "SufficientPods" if allowed else "InsufficientPods",
                 "message": "", "observedGeneration": int(meta.get("generation") or 1)}
    condition["lastTransitionTime"] = (before.get("lastTransitionTime", now)
                                       if before.get("status") == condition["status"]
                                       else now)
    others = [c for c in current.get("conditions") or []
              if c.get("type") != "DisruptionAllowed"]
    return {**current, "observedGeneration": int(meta.get("generation") or 1),
            "expectedPods": expected, "currentHealthy": healthy, "desiredHealthy": desired,
            "disruptionsAllowed": allowed, "conditions": [*others, condition]}


class DisruptionController:
    name = "disruption-controller"

    def __init__(self, client: KubeClient, informers: InformerFactory, stopper: Stopper) -> None:
        self.client = client
        self.stopper = stopper
        self.pdbs = informers.get(PDBS)
        self.pods = informers.get(PODS)
        self.queue = WorkQueue()
        self.pdbs.add_handler(self._on_pdb)
        self.pods.add_handler(self._on_pod)

    def start(self) -> list[threading.Thread]:
        return start_workers(self.queue, self.reconcile, self.stopper, self.name, WORKERS)

    def _on_pdb(self, kind: str, pdb: Obj, old: Obj | None) -> None:
        if kind != "DELETED":
            self.queue.add(f"{metadata(pdb).get('namespace')}/{metadata(pdb).get('name')}")

    def _on_pod(self, kind: str, pod: Obj, old: Obj | None) -> None:
        ns = metadata(pod).get("namespace")
        for pdb in self.pdbs.items():
            if metadata(pdb).get("namespace") == ns:
                self.queue.add(f"{ns}/{metadata(pdb).get('name')}")

    def reconcile(self, key: str) -> None:
        pdb = self.pdbs.get(key)
        if pdb is None:
            return
        current = pdb.get("status") or {}
        wanted = pdb_status(pdb, self.pods.items(), now_rfc3339())
        if all(current.get(k) == v for k, v in wanted.items() if k != "conditions") and [
                {k: v for k, v in c.items() if k != "lastTransitionTime"}
                for c in current.get("conditions") or []] == [
                {k: v for k, v in c.items() if k != "lastTransitionTime"}
                for c in wanted["conditions"]]:
            return
        ns, name = key.split("/", 1)
        try:
            self.client.merge_patch(PDBS.item(name, ns, "status"), {"status": wanted})
        except ApiError as error:
            if error.status != 404:
                raise
