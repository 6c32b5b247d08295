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
import re

from gpushare.api.objects import Obj
from gpushare.controllers.events import EventRecorder, now_rfc3339
from gpushare.kube.client import PODS, ApiError, KubeClient

log = logging.getLogger(__name__)

UNSCHEDULABLE = "Unschedulable"
_NAMES_A_POD = re.compile(r"^Resources were not found for pod (\S+) due to: ")


def reason_for_pod(reason: str, pod_key: str) -> str:
    """A pod group's reason as one of its pods reads it: the core names the pod it tried
    (``Resources were not found for pod ns/p-0 due to: ...``); every other pod of the
    group is told the same about itself, not about a sibling (which may be long gone)."""
    m = _NAMES_A_POD.match(reason)
    if m is None or m.group(1) == pod_key:
        return reason
    return f"Resources were not found for pod {pod_key} due to: {reason[m.end():]}"


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


def podgroup_unschedulable(message: str, queue: str, node_pool: str, previous: object,
                           now: str) -> Obj:
    """A PodGroup's ``UnschedulableOnNodePool`` scheduling condition as KAI's scheduler
    writes it: the deprecated ``reason``/``message`` pair and the ``reasons`` list, and a
    ``transitionID`` one past that of the last condition stored (``previous``: the
    PodGroup's ``status.schedulingConditions``)."""
    last = previous[-1] if isinstance(previous, list) and previous else {}
    try:
        transition = int(last.get("transitionID", 0)) if isinstance(last, dict) else 0
    except (TypeError, ValueError):
        transition = 0
    return {
        "type": "UnschedulableOnNodePool",
        "nodePool": node_pool,
        "reason": UNSCHEDULABLE,
        "message": message,
        "reasons": [{"reason": UNSCHEDULABLE, "message": message,
                     "details": {"queueDetails": {"name": queue}}}],
        "transitionID": str(max(transition, 0) + 1),
        "lastTransitionTime": now,
        "status": "True",
    }


def record_scheduled(events: EventRecorder, pod: Obj | None, node: str) -> None:
    if pod is None:
        return
    meta = pod.get("metadata") or {}
    events.emit(pod, "Normal", "Scheduled",
                f"Successfully assigned {meta.get('namespace')}/{meta.get('name')} to {node}")
