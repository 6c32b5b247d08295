"""What kube-scheduler writes besides the binding: the pod's ``PodScheduled`` condition
and the ``Scheduled`` event.

* a pod that cannot be placed gets ``PodScheduled=False`` with reason ``Unschedulable``
  and the scheduler's message (written when the message changes), as
  ``kubectl describe pod`` and ``kubectl wait --for=condition=PodScheduled=false`` expect;
* every successful binding gets a ``Normal Scheduled`` event
  ``Successfully assigned NS/NAME to NODE`` (the API server sets ``PodScheduled=True``
  as it binds).
"""

from __future__ import annotations

import logging

from gpushare.api.objects import Obj
from gpushare.controllers.events import EventRecorder, now_rfc3339
from gpushare.kube.client import PODS, ApiError, KubeClient

log = logging.getLogger(__name__)

UNSCHEDULABLE = "Unschedulable"


def unschedulable_condition(message: str, now: str) -> Obj:
    return {"type": "PodScheduled", "status": "False", "reason": UNSCHEDULABLE,
            "message": message, "lastProbeTime": None, "lastTransitionTime": now}


def condition_of(pod: Obj, kind: str = "PodScheduled") -> Obj | None:
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if isinstance(condition, dict) and condition.get("type") == kind:
            return condition
    return None


def mark_unschedulable(client: KubeClient, pod: Obj, message: str) -> None:
    """Write ``PodScheduled=False`` on a pending pod (a no-op if it already says so).

    A strategic merge patch of the status subresource: the other conditions stay, and the
    transition time is kept while the status does not change."""
    meta = pod.get("metadata") or {}
    current = condition_of(pod)
    if current is not None and current.get("status") == "False" and (
        current.get("reason") == UNSCHEDULABLE and current.get("message") == message
    ):
        return
    now = now_rfc3339()
    if current is not None and current.get("status") == "False":
        now = str(current.get("lastTransitionTime") or now)
    patch = {"status": {"conditions": [unschedulable_condition(message, now)]}}
    try:
        client.strategic_patch(
            PODS.item(str(meta.get("name")), str(meta.get("namespace")), "status"), patch
        )
    except ApiError as error:
        if not (error.not_found or error.conflict):
            log.debug("PodScheduled of %s/%s not written: %s", meta.get("namespace"),
                      meta.get("name"), error)


def record_scheduled(events: EventRecorder, pod: Obj | None, node: str) -> None:
    if pod is None:
        return
    meta = pod.get("metadata") or {}
    events.emit(pod, "Normal", "Scheduled",
                f"Successfully assigned {meta.get('namespace')}/{meta.get('name')} to {node}")
