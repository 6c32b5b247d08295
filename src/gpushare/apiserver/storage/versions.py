"""resourceVersion semantics of reads: `resourceVersionMatch`, too large and too old.

Kubernetes' rules for a list: no resourceVersion is the newest state (a consistent read);
`0` is any state (here always the newest); N with `NotOlderThan` (or no match) is a state
at least as new as N; N with `Exact` is the state exactly at N, which this server rebuilds
from the watch event log (410 Expired once N has fallen out of it). A version the server
has not reached yet is answered, after waiting a moment for it, like kube-apiserver's
watch cache does: 504 Timeout "Too large resource version" with the cause
`ResourceVersionTooLarge` and `retryAfterSeconds`.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from gpushare.apiserver.errors import ApiError, bad_request
from gpushare.apiserver.storage.store import ADDED, Store

EXACT = "Exact"
NOT_OLDER_THAN = "NotOlderThan"
# How long a read for a resourceVersion not reached yet waits before answering 504.
TOO_LARGE_WAIT = 3.0
RETRY_AFTER_SECONDS = 1


def parse_rv(value: str, param: str = "resourceVersion") -> int:
    try:
        rv = int(value)
    except ValueError as e:
        raise bad_request(f'invalid {param} "{value}": must be an integer') from e
    if rv < 0:
        raise bad_request(f'invalid {param} "{value}": must not be negative')
    return rv


def list_request(query: dict[str, str]) -> tuple[int | None, str]:
    """(requested resourceVersion or None for the newest state, match) of a list."""
    value = query.get("resourceVersion") or ""
    match = query.get("resourceVersionMatch") or ""
    if match not in ("", EXACT, NOT_OLDER_THAN):
        raise ApiError(422, f'resourceVersionMatch: Unsupported value: "{match}": supported '
                            f'values: "{EXACT}", "{NOT_OLDER_THAN}"', "Invalid",
                       {"causes": [{"reason": "FieldValueNotSupported",
                                    "field": "resourceVersionMatch",
                                    "message": f'Unsupported value: "{match}"'}]})
    if match and not value:
        raise ApiError(422, "resourceVersionMatch is forbidden unless resourceVersion is "
                            "provided", "Invalid",
                       {"causes": [{"reason": "FieldValueForbidden",
                                    "field": "resourceVersionMatch",
                                    "message": "Forbidden: resourceVersionMatch is forbidden "
                                               "unless resourceVersion is provided"}]})
    if not value:
        return None, match
    rv = parse_rv(value)
    if match == EXACT and rv == 0:
        raise ApiError(422, 'resourceVersionMatch: Forbidden: resourceVersionMatch "Exact" '
                            'is forbidden for resourceVersion "0"', "Invalid",
                       {"causes": [{"reason": "FieldValueForbidden",
                                    "field": "resourceVersionMatch",
                                    "message": 'Forbidden: resourceVersionMatch "Exact" is '
                                               'forbidden for resourceVersion "0"'}]})
    return rv, match


def too_large(requested: int, current: int) -> ApiError:
    return ApiError(504, f"Timeout: Too large resource version: {requested}, current: "
                         f"{current}", "Timeout",
                    {"causes": [{"reason": "ResourceVersionTooLarge",
                                 "message": "Too large resource version"}],
                     "retryAfterSeconds": RETRY_AFTER_SECONDS})


def too_old(requested: int, store: Store) -> ApiError:
    return ApiError(410, f"too old resource version: {requested} ({store.floor_rv + 1})",
                    "Expired")


async def wait_for(store: Store, rv: int, timeout: float | None = None) -> None:
    """Return once `rv` is committed; raise the too-large answer after `timeout`."""
    if rv <= store.committed_rv:
        return
    deadline = time.monotonic() + (TOO_LARGE_WAIT if timeout is None else timeout)
    while rv > store.committed_rv:
        if time.monotonic() >= deadline:
            raise too_large(rv, store.committed_rv)
        await asyncio.sleep(0.05)


def objects_at(store: Store, cluster: str, gr: str, current: list[dict[str, Any]],
               rv: int, in_scope: Any) -> list[dict[str, Any]]:
    """`current` (the selected objects now) as they were at `rv`, from the event log.

    `in_scope(obj)` says whether an object belongs to the request's namespace and
    selectors. Raises 410 when events after `rv` are no longer kept.
    """
    events = store.changes_since(rv)
    if events is None:
        raise too_old(rv, store)
    if not events:
        return current
    by_key: dict[tuple[str, str], dict[str, Any] | None] = {
        (o["metadata"].get("namespace") or "", o["metadata"]["name"]): o for o in current}
    for event in reversed(events):
        if event.cluster != cluster or event.gr != gr:
            continue
        m = event.obj["metadata"]
        key = (m.get("namespace") or "", m["name"])
        before = event.old if event.type != ADDED else None
        by_key[key] = before if before is not None and in_scope(before) else None
    items = [o for o in by_key.values() if o is not None]
    items.sort(key=lambda o: (o["metadata"].get("namespace") or "", o["metadata"]["name"]))
    return items
