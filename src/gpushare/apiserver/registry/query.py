"""Which objects a list or watch request selects, and how lists are paged."""

from __future__ import annotations

import base64
from typing import Any

import orjson

from gpushare.apiserver.errors import ApiError, bad_request
from gpushare.apiserver.resources import ResourceInfo
from gpushare.apiserver.storage.selectors import (
    fields_match,
    labels_match,
    parse_field_selector,
    parse_label_selector,
)
from gpushare.apiserver.storage.store import Store


def select(store: Store, cluster: str, info: ResourceInfo, ns: str | None,
           query: dict[str, str]) -> list[dict[str, Any]]:
    """The objects matching the request's namespace and selectors, in key order.

    Uses the cheapest index available: a name, an indexed field, or the most selective
    label equality; otherwise scans the namespace (or the whole kind).
    """
    gr = info.group_resource
    labels = parse_label_selector(query.get("labelSelector"))
    fields = parse_field_selector(query.get("fieldSelector"), gr)
    candidates = None
    for f in fields:
        if f.negate:
            continue
        if f.path == "metadata.name":
            if ns is not None or not info.namespaced:
                one = store.get(cluster, gr, ns or "", f.value)
                candidates = [one] if one is not None else []
                break
            continue
        if f.path == "metadata.namespace" and ns is None:
            ns = f.value
            continue
        indexed = store.list_indexed(cluster, gr, f.path, f.value)
        if indexed is not None:
            candidates = indexed
            break
    if candidates is None:
        best = None
        for req in labels:
            if req.op in ("=", "in"):
                n = store.label_count(cluster, gr, req.key, req.values)
                if best is None or n < best[0]:
                    best = (n, req)
        if best is not None and best[0] < store.count(cluster, gr, ns):
            candidates = store.list_labeled(cluster, gr, best[1].key, best[1].values)
    if candidates is None:
        items = list(store.list(cluster, gr, ns if info.namespaced else None))
    else:
        items = [o for o in candidates
                 if ns is None or (o["metadata"].get("namespace") or "") == ns]
    if labels or fields:
        items = [o for o in items if labels_match(labels, o) and fields_match(fields, o)]
    items.sort(key=lambda o: (o["metadata"].get("namespace") or "", o["metadata"]["name"]))
    return items


def paginate(items: list[dict[str, Any]], query: dict[str, str],
             rv: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Apply `limit`/`continue` (a token naming the last key returned) to a sorted list."""
    list_meta: dict[str, Any] = {"resourceVersion": str(rv)}
    token = query.get("continue")
    if token:
        try:
            start = orjson.loads(base64.urlsafe_b64decode(token.encode()))
            after = (start["ns"], start["name"])
        except (ValueError, KeyError, TypeError) as e:
            raise ApiError(400, "invalid continue token", "BadRequest") from e
        items = [o for o in items
                 if (o["metadata"].get("namespace") or "", o["metadata"]["name"]) > after]
    try:
        limit = int(query.get("limit") or 0)
    except ValueError as e:
        raise bad_request("limit must be an integer") from e
    if limit > 0 and len(items) > limit:
        last = items[limit - 1]["metadata"]
        list_meta["continue"] = base64.urlsafe_b64encode(orjson.dumps(
            {"ns": last.get("namespace") or "", "name": last["name"], "rv": rv})).decode()
        list_meta["remainingItemCount"] = len(items) - limit
        items = items[:limit]
    return items, list_meta
