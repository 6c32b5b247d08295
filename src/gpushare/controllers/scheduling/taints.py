"""Node taints with the ``NoSchedule`` or ``NoExecute`` effect keep out pods that do not
tolerate them, as kube-scheduler's TaintToleration filter does.

The scheduler core matches node labels only (``nodeSelector`` and required affinity with
``In`` terms), so taints reach it as labels: every node carries the internal label
``TAINTS_LABEL`` whose value names its blocking taints (empty when it has none), and a
pod gets a required-affinity term allowing the values of the taint sets in the cluster
that it tolerates in full. The set of distinct taint sets is small (a few kinds of node);
the mirror re-derives pods' terms when it changes. Neither label nor term is written to
the API. ``PreferNoSchedule`` is a preference and does not filter.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpushare.api.objects import Obj
from gpushare.model.node import TAINTS_LABEL

Taint = tuple[str, str, str]  # key, value, effect

__all__ = ["TAINTS_LABEL", "allowed", "blocking_taints", "node_labels", "signature"]
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


def blocking_taints(node: Obj) -> tuple[Taint, ...]:
    """The node's taints that filter pods, sorted, without duplicates."""
    found = {
        (str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect")))
        for t in (node.get("spec") or {}).get("taints") or ()
        if isinstance(t, dict) and t.get("effect") in BLOCKING_EFFECTS
    }
    return tuple(sorted(found))


def signature(taints: Iterable[Taint]) -> str:
    """One label value for a set of taints: ``key=value:effect`` joined by commas."""
    return ",".join(f"{key}={value}:{effect}" for key, value, effect in taints)


def node_labels(node: Obj, labels: dict[str, str]) -> dict[str, str]:
    """The labels the core sees: the node's own plus its taint set."""
    labels[TAINTS_LABEL] = signature(blocking_taints(node))
    return labels


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


def allowed(pod: Obj, taint_sets: Iterable[tuple[Taint, ...]]) -> tuple[str, ...]:
    """The taint-set label values of nodes the pod may land on (always the untainted)."""
    values = {""}
    values.update(signature(taints) for taints in taint_sets if tolerates_all(pod, taints))
    return tuple(sorted(values))
