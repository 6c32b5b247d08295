"""A PodGroup's ``status.conditions``, written one type at a time.

A JSON merge patch replaces a list whole, and several controllers keep conditions of their
own on one PodGroup (``Reserved``, ``Requeued``, ``Failed``): each writes its type by
reading the stored list, replacing its own entry, and patching the list back with the
``resourceVersion`` it read, so a write that raced another is read and made again.
"""

from __future__ import annotations

import logging
from typing import Any

from gpushare.api.objects import Obj
from gpushare.kube.client import PODGROUPS, ApiError, KubeClient

log = logging.getLogger(__name__)

ATTEMPTS = 5


def with_condition(conditions: Any, kind: str, condition: Obj | None) -> list[Obj]:
    """``conditions`` with the entry of type ``kind`` replaced by ``condition`` (None:
    removed); the other entries as they were, in their order."""
    kept = [c for c in conditions or () if isinstance(c, dict) and c.get("type") != kind]
    return kept if condition is None else [*kept, condition]


def write_condition(client: KubeClient, namespace: str, name: str, kind: str,
                    condition: Obj | None) -> bool:
    """Set (or, with None, remove) the PodGroup's condition of type ``kind``, keeping the
    others; False when the PodGroup is gone or the write kept conflicting."""
    for _ in range(ATTEMPTS):
        pg = client.get(PODGROUPS.item(name, namespace))
        if pg is None:
            return False
        current = (pg.get("status") or {}).get("conditions")
        wanted = with_condition(current, kind, condition)
        if wanted == (current or []):
            return True
        version = (pg.get("metadata") or {}).get("resourceVersion")
        try:
            client.merge_patch(PODGROUPS.item(name, namespace, "status"),
                               {"metadata": {"resourceVersion": version},
                                "status": {"conditions": wanted}})
            return True
        except ApiError as error:
            if error.not_found:
                return False
            if not error.conflict:
                raise
    log.warning("PodGroup %s/%s condition %s not written: kept conflicting", namespace,
                name, kind)
    return False
