"""The node's side of pod limits: which cgroups it uses, what the Node says about them, and
which pods it refuses when it cannot limit them.

``--cgroups auto`` (default) uses the host's cgroups when the agent can make its own under
its parent; ``--cgroups required`` makes a host without them an error at start; ``--cgroups
none`` is an operator's choice to run without. Without cgroups the Node condition
``PodLimits`` is ``False`` (reason ``NoCgroups``, the message saying why) and a pod is
refused (``Failed``, reason ``LimitsUnavailable``) when it is a tenant's (label
``tenancy.gpushare.io/tenant``) or asks for a memory or CPU limit: it would run less
isolated than it asked, and that is never silent.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpushare.agent.runtime.cgroups import (
    DEFAULT_POD_PIDS,
    CgroupError,
    Cgroups,
    detect,
    node_parent,
    pod_sets,
    remove,
)
from gpushare.agent.runtime.podlimits import PodLimits
from gpushare.api.objects import Meta
from gpushare.api.timefmt import rfc3339
from gpushare.tenancy.names import TENANT_LABEL

log = logging.getLogger("gpushare.agent")

CONDITION = "PodLimits"
REFUSED = "LimitsUnavailable"
MODES = ("auto", "required", "none")


class LimitsRefused(RuntimeError):
    """The node cannot limit this pod as it must be limited (the message says why)."""


@dataclass(frozen=True, slots=True)
class NodeLimits:
    cgroups: Cgroups | None
    reason: str  # what is in force, or why nothing is
    pids_limit: int | None = DEFAULT_POD_PIDS

    @classmethod
    def choose(cls, mode: str, data_dir: Path, parent: str | None = None,
               pids_limit: int | None = DEFAULT_POD_PIDS) -> NodeLimits:
        """The cgroups for `mode`; `parent` (default: one per data directory under the
        agent's own cgroup) is made now, so a host that refuses is known at start."""
        if mode not in MODES:
            raise CgroupError(f"--cgroups: {mode!r} is not one of {', '.join(MODES)}")
        if pids_limit is not None and pids_limit < 1:
            raise CgroupError(f"--pod-pids-limit: {pids_limit} must be at least 1")
        if mode == "none":
            return cls(None, "--cgroups none: pods run without memory, CPU or pids limits",
                       pids_limit)
        try:
            support = detect()
            cgroups = Cgroups(support, parent or node_parent(data_dir))
            cgroups.ensure_root()
        except (CgroupError, OSError) as exc:
            if mode == "required":
                raise CgroupError(f"--cgroups required: {exc}") from exc
            log.warning("pods get no cgroup limits: %s", exc)
            return cls(None, f"no cgroups: {exc}", pids_limit)
        pids = f"pids {pids_limit} per pod" if pids_limit else "no pids limit"
        return cls(cgroups, f"{support.reason}; {pids}", pids_limit)

    @property
    def enforced(self) -> bool:
        return self.cgroups is not None

    def condition(self, now: float, since: float) -> dict[str, Any]:
        """The Node condition ``PodLimits`` (``kubectl describe node``)."""
        return {
            "type": CONDITION,
            "status": "True" if self.enforced else "False",
            "reason": "Cgroups" if self.enforced else "NoCgroups",
            "message": self.reason,
            "lastHeartbeatTime": rfc3339(now),
            "lastTransitionTime": rfc3339(since),
        }

    def for_pod(self, pod: Mapping[str, Any], directory: Path) -> PodLimits | None:
        """The pod's cgroups (not made yet); None when the node has none and may run the
        pod without. `LimitsRefused` when it may not; `LimitsError` for a bad value."""
        if self.cgroups is not None:
            return PodLimits(self.cgroups, pod, self.pids_limit, directory)
        meta = Meta.of(pod)
        if TENANT_LABEL in meta.labels:
            raise LimitsRefused(f"this node cannot limit a tenant's pod ({self.reason})")
        for kind in ("initContainers", "containers"):
            for i, container in enumerate((pod.get("spec") or {}).get(kind) or []):
                limits = (container.get("resources") or {}).get("limits") or {}
                for name in ("memory", "cpu"):
                    if name in limits:
                        raise LimitsRefused(
                            f"spec.{kind}[{i}].resources.limits.{name}: this node cannot "
                            f"enforce it ({self.reason})")
        return None

    def clean(self, live_uids: Iterable[str]) -> list[str]:
        """Remove the pod cgroups under the node's parent whose pod is not live (after
        killing what is left in them); the uids removed."""
        if self.cgroups is None:
            return []
        live = set(live_uids)
        removed = []
        for uid, cgroup in pod_sets(self.cgroups.root):
            if uid not in live:
                remove(cgroup)
                removed.append(uid)
        return removed
