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

from gpushare.api.objects import Meta, Obj
from gpushare.api.objects import selector_matches as selects
from gpushare.api.timefmt import parse_rfc3339
from gpushare.controllers.events import now_rfc3339
from gpushare.kube.client import PODS, ApiError, KubeClient, Resource, Stopper
from gpushare.kube.informer import WorkQueue, start_workers
from gpushare.kube.informers import InformerFactory

PDBS = Resource("policy/v1", "poddisruptionbudgets", True)
WORKERS = 1
#: How long an eviction recorded in ``disruptedPods`` counts while its pod stays.
DISRUPTION_TIMEOUT = 120.0


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
    meta, spec = Meta.of(pdb), pdb.get("spec") or {}
    mine = [p for p in pods if Meta.of(p).namespace == meta.namespace
            and not Meta.of(p).deleting
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            and selects(spec.get("selector"), Meta.of(p).labels)]
    expected = len(mine)
    current = pdb.get("status") or {}
    disrupted = _still_disrupted(current.get("disruptedPods"), mine, now)
    healthy = sum(1 for p in mine if Meta.of(p).name not in disrupted and any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (p.get("status") or {}).get("conditions") or []))
    if spec.get("minAvailable") is not None:
        desired = _count(spec["minAvailable"], expected)
    elif spec.get("maxUnavailable") is not None:
        desired = max(expected - _count(spec["maxUnavailable"], expected), 0)
    else:
        desired = 0
    allowed = max(healthy - desired, 0)
    before: dict[str, Any] = next((c for c in current.get("conditions") or []
                   if c.get("type") == "DisruptionAllowed"), {})
    condition = {"type": "DisruptionAllowed", "status": "True" if allowed else "False",
                 "reason": "SufficientPods" if allowed else "InsufficientPods",
                 "message": "", "observedGeneration": meta.generation or 1}
    condition["lastTransitionTime"] = (before.get("lastTransitionTime", now)
                                       if before.get("status") == condition["status"]
                                       else now)
    others = [c for c in current.get("conditions") or []
              if c.get("type") != "DisruptionAllowed"]
    out = {**current, "observedGeneration": meta.generation or 1,
            "expectedPods": expected, "currentHealthy": healthy, "desiredHealthy": desired,
            "disruptionsAllowed": allowed, "conditions": [*others, condition]}
    if disrupted:
        out["disruptedPods"] = disrupted
    else:
        out.pop("disruptedPods", None)
    return out


def _still_disrupted(recorded: Any, pods: list[Obj], now: str) -> dict[str, str]:
    """The evictions the API server recorded (``disruptedPods``) whose pods are still
    there and not yet being deleted, for at most DISRUPTION_TIMEOUT seconds: they count as
    already disrupted, as kube-controller-manager counts them."""
    if not isinstance(recorded, dict) or not recorded:
        return {}
    live = {Meta.of(p).name for p in pods}
    try:
        now_s = parse_rfc3339(now)
    except ValueError:
        return {}
    out: dict[str, str] = {}
    for name, when in recorded.items():
        try:
            fresh = now_s - parse_rfc3339(str(when)) < DISRUPTION_TIMEOUT
        except ValueError:
            fresh = False
        if name in live and fresh:
            out[str(name)] = str(when)
    return out


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
            self.queue.add(f"{Meta.of(pdb).namespace}/{Meta.of(pdb).name}")

    def _on_pod(self, kind: str, pod: Obj, old: Obj | None) -> None:
        ns = Meta.of(pod).namespace
        for pdb in self.pdbs.items():
            if Meta.of(pdb).namespace == ns:
                self.queue.add(f"{ns}/{Meta.of(pdb).name}")

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
