"""Kinds served in two groups over one storage, as Kubernetes does: events.k8s.io/v1 Events
are core v1 Events, stored once and converted field by field on the way in and out."""

from __future__ import annotations

from typing import Any

from gpushare.apiserver.resources import ResourceInfo

# events.k8s.io/v1 field -> core/v1 field
_EVENT_FIELDS = {
    "regarding": "involvedObject",
    "note": "message",
    "deprecatedSource": "source",
    "deprecatedFirstTimestamp": "firstTimestamp",
    "deprecatedLastTimestamp": "lastTimestamp",
    "deprecatedCount": "count",
    "reportingController": "reportingComponent",
}
_EVENT_FIELDS_BACK = {v: k for k, v in _EVENT_FIELDS.items()}


def converted(info: ResourceInfo) -> bool:
    return info.group == "events.k8s.io"


def to_storage(info: ResourceInfo, obj: Any) -> Any:
    """An object of `info`'s version in the stored (core) form."""
    if not converted(info) or not isinstance(obj, dict):
        return obj
    out = {_EVENT_FIELDS.get(k, k): v for k, v in obj.items()}
    out["apiVersion"] = "v1"
    out["kind"] = "Event"
    return out


def from_storage(info: ResourceInfo, obj: dict[str, Any]) -> dict[str, Any]:
    """A stored object as `info`'s version shows it."""
    if not converted(info):
        return obj
    out = {_EVENT_FIELDS_BACK.get(k, k): v for k, v in obj.items()}
    out["apiVersion"] = info.api_version
    out["kind"] = info.kind
    return out
