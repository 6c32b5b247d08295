"""Agentless nodes take only pods that tolerate them.

``gpushare node add`` registers declared capacity with no agent: a pod bound there never
runs (it stays ``Pending`` in phase). Such a node carries the taint
``gpushare.io/no-agent=true:NoSchedule`` (as virtual-kubelet nodes carry theirs), so
kube-scheduler on a real cluster leaves it alone, and so does the gpushare scheduler: a
pod lands there only with a matching toleration (capacity planning, scheduling tests)::

    tolerations: [{key: gpushare.io/no-agent, operator: Exists, effect: NoSchedule}]

The scheduler core matches ``nodeSelector`` only, so the taint reaches it as a selector:
nodes without the taint carry the internal label ``ACCEPTS_ALL``, and a pod that does
not tolerate the taint requires it. Neither is written to the API.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

NO_AGENT_TAINT = "gpushare.io/no-agent"
TAINT = {"key": NO_AGENT_TAINT, "value": "true", "effect": "NoSchedule"}
#: Not a valid label key, so no real label can clash with it.
ACCEPTS_ALL = "(no gpushare.io/no-agent taint)"
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


def tainted(node: Obj) -> bool:
    return any(
        isinstance(t, dict) and t.get("key") == NO_AGENT_TAINT
        and t.get("effect") in BLOCKING_EFFECTS
        for t in (node.get("spec") or {}).get("taints") or ()
    )


def tolerates(pod: Obj) -> bool:
    """Whether one of the pod's tolerations matches the no-agent taint (Kubernetes'
    rules: an empty key with ``Exists`` tolerates everything; an empty effect any effect)."""
    for toleration in (pod.get("spec") or {}).get("tolerations") or ():
        if not isinstance(toleration, dict):
            continue
        key = toleration.get("key") or ""
        operator = toleration.get("operator") or "Equal"
        effect = toleration.get("effect") or ""
        if effect and effect != "NoSchedule":
            continue
        if not key and operator == "Exists":
            return True
        if key != NO_AGENT_TAINT:
            continue
        if operator == "Exists" or (toleration.get("value") or "") == TAINT["value"]:
            return True
    return False


def node_labels(node: Obj, labels: dict[str, str]) -> dict[str, str]:
    """The labels the core sees: ``ACCEPTS_ALL`` on a node without the taint."""
    if not tainted(node):
        labels[ACCEPTS_ALL] = "true"
    return labels


def pod_selector(pod: Obj, selector: dict[str, str]) -> dict[str, str]:
    """The selector the core sees: a pod that does not tolerate the taint needs a node
    without it."""
    if not tolerates(pod):
        selector[ACCEPTS_ALL] = "true"
    return selector
