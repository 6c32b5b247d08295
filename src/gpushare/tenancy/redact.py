"""What of the host a tenant may read in the texts the syncer copies back to it.

The host's scheduler writes messages for the host (pending reasons, `Evict` events): they
name queues (`queue ml-org: allocated 1 + request 0.5 > limit 1`, the parent queue the
tenant cannot see) and host pods (`for queue vision: vc-vision/train-x1`, another tenant's
pod). Before such a text reaches a tenant (its pods' Events and status), every queue but
the tenant's own and every pod key but its own (translated back to the tenant's names) is
replaced by a placeholder. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

HIDDEN_QUEUE = "queue (a platform queue)"
HIDDEN_POD = "(a pod of another workload)"

_QUEUE = re.compile(r"\bqueue (['\"]?)([A-Za-z0-9][-A-Za-z0-9_.]*)\1")
# namespace/name, not inside a longer word or a dotted name (nvidia.com/gpu, 0/1 nodes)
_POD_KEY = re.compile(
    r"(?<![\w./-])([a-z][-a-z0-9]{0,62})/([a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?)(?![\w/-])")


def redact(text: str, queues: Iterable[str], own_pod: Callable[[str, str], str | None]) -> str:
    """`text` with foreign queue names and pod keys hidden. `own_pod(ns, name)` gives the
    tenant's `namespace/name` of a host pod key that is the tenant's own, else None."""
    visible = set(queues)

    def queue(match: re.Match[str]) -> str:
        return match.group(0) if match.group(2) in visible else HIDDEN_QUEUE

    def pod(match: re.Match[str]) -> str:
        return own_pod(match.group(1), match.group(2)) or HIDDEN_POD

    return _POD_KEY.sub(pod, _QUEUE.sub(queue, text))


def redact_status(status: dict[str, Any], queues: Iterable[str],
                  own_pod: Callable[[str, str], str | None]) -> dict[str, Any]:
    """A pod status with the messages of the pod and of its conditions redacted."""
    out = dict(status)
    if isinstance(out.get("message"), str):
        out["message"] = redact(out["message"], queues, own_pod)
    conditions = out.get("conditions")
    if isinstance(conditions, list):
        out["conditions"] = [
            {**c, "message": redact(c["message"], queues, own_pod)}
            if isinstance(c, dict) and isinstance(c.get("message"), str) else c
            for c in conditions]
    return out
