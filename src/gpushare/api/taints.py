"""Kubernetes' taints and tolerations: which of a node's taints keep pods out (the
``NoSchedule`` and ``NoExecute`` effects) and whether a toleration matches a taint, as
kube-scheduler's TaintToleration filter reads them. Pure: the scheduler's mirror and the
DaemonSet controller both decide with these."""

from __future__ import annotations

from collections.abc import Iterable

from gpushare.api.objects import Obj

Taint = tuple[str, str, str]  # key, value, effect
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


def blocking_taints(node: Obj) -> tuple[Taint, ...]:
    """The node's taints that filter pods, sorted, without duplicates."""
    found = {
        (str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect")))
        for t in (node.get("spec") or {}).get("taints") or ()
        if isinstance(t, dict) and t.get("effect") in BLOCKING_EFFECTS
    }
    return tuple(sorted(found))


def tolerated(toleration: Obj, taint: Taint) -> bool:
    """Kubernetes' matching: an empty effect matches every effect; ``Exists`` any value;
    an empty key with ``Exists`` every taint; ``Equal`` (the default) the same value."""
    key, value, effect = taint
    wanted_effect = toleration.get("effect") or ""
    if wanted_effect and wanted_effect != effect:
        return False
    operator = toleration.get("operator") or "Equal"
    wanted_key = toleration.get("key") or ""
    if not wanted_key:
        return operator == "Exists"
    if wanted_key != key:
        return False
    return operator == "Exists" or str(toleration.get("value") or "") == value


def tolerates_all(pod: Obj, taints: Iterable[Taint]) -> bool:
    tolerations = [t for t in (pod.get("spec") or {}).get("tolerations") or ()
                   if isinstance(t, dict)]
    return all(any(tolerated(t, taint) for t in tolerations) for taint in taints)
