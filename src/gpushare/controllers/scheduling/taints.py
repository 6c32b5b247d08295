"""Node taints with the ``NoSchedule`` or ``NoExecute`` effect keep out pods that do not
tolerate them, as kube-scheduler's TaintToleration filter does (the matching itself:
``gpushare.api.taints``).

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
from gpushare.api.taints import Taint, blocking_taints, tolerates_all

#: Not a valid label key, so no real label can clash with it.
TAINTS_LABEL = "(blocking taints)"


def signature(taints: Iterable[Taint]) -> str:
    """One label value for a set of taints: ``key=value:effect`` joined by commas."""
    return ",".join(f"{key}={value}:{effect}" for key, value, effect in taints)


def node_labels(node: Obj, labels: dict[str, str]) -> dict[str, str]:
    """The labels the core sees: the node's own plus its taint set."""
    labels[TAINTS_LABEL] = signature(blocking_taints(node))
    return labels


def allowed(pod: Obj, taint_sets: Iterable[tuple[Taint, ...]]) -> tuple[str, ...]:
    """The taint-set label values of nodes the pod may land on (always the untainted)."""
    values = {""}
    values.update(signature(taints) for taints in taint_sets if tolerates_all(pod, taints))
    return tuple(sorted(values))
