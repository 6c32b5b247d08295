"""Label and field selectors (the query-string syntax of `labelSelector`/`fieldSelector`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpushare.apiserver.errors import bad_request
from gpushare.apiserver.storage.store import field_value

_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!exists"
    values: frozenset[str]

    def matches(self, labels: dict[str, str]) -> bool:
        op = self.op
        if op == "=":
            return labels.get(self.key) in self.values
        if op == "!=":
            return labels.get(self.key) not in self.values
        if op == "in":
            return self.key in labels and labels[self.key] in self.values
        if op == "notin":
            return labels.get(self.key) not in self.values
        if op == "exists":
            return self.key in labels
        return self.key not in labels


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


_SET_RE = re.compile(r"^(\S+)\s+(in|notin)\s*\((.*)\)$")


def parse_label_selector(text: str | None) -> tuple[Requirement, ...]:
    if not text:
        return ()
    reqs: list[Requirement] = []
    for term in _split_top_level(text):
        m = _SET_RE.match(term)
        if m:
            key, op, vals = m.group(1), m.group(2), m.group(3)
            values = frozenset(v.strip() for v in vals.split(",") if v.strip())
            reqs.append(_checked(Requirement(key, op, values)))
        elif term.startswith("!"):
            reqs.append(_checked(Requirement(term[1:].strip(), "!exists", frozenset())))
        elif "!=" in term:
            key, value = term.split("!=", 1)
            reqs.append(_checked(Requirement(key.strip(), "!=", frozenset([value.strip()]))))
        elif "==" in term:
            key, value = term.split("==", 1)
            reqs.append(_checked(Requirement(key.strip(), "=", frozenset([value.strip()]))))
        elif "=" in term:
            key, value = term.split("=", 1)
            reqs.append(_checked(Requirement(key.strip(), "=", frozenset([value.strip()]))))
        else:
            reqs.append(_checked(Requirement(term, "exists", frozenset())))
    return tuple(reqs)


def _checked(req: Requirement) -> Requirement:
    if not _LABEL_KEY.match(req.key):
        raise bad_request(f"unable to parse requirement: invalid label key {req.key!r}")
    for v in req.values:
        if len(v) > 63 or not _LABEL_VALUE.match(v):
            raise bad_request(f"unable to parse requirement: invalid label value {v!r}")
    return req


def labels_match(reqs: tuple[Requirement, ...], obj: dict[str, Any]) -> bool:
    if not reqs:
        return True
    labels = obj["metadata"].get("labels") or {}
    return all(r.matches(labels) for r in reqs)


@dataclass(frozen=True, slots=True)
class FieldRequirement:
    path: str
    value: str
    negate: bool


# Fields each kind can be selected by, besides metadata.name and metadata.namespace.
SELECTABLE_FIELDS: dict[str, frozenset[str]] = {
    "pods": frozenset(
        {
            "spec.nodeName",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.restartPolicy",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        }
    ),
    "events": frozenset(
        {
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "reportingController",  # events.k8s.io's name of reportingComponent
            "source",
            "type",
        }
    ),
    "certificates.k8s.io/certificatesigningrequests": frozenset({"spec.signerName"}),
    "nodes": frozenset({"spec.unschedulable"}),
    "namespaces": frozenset({"status.phase"}),
    "secrets": frozenset({"type"}),
    "batch/jobs": frozenset({"status.successful"}),
    "apps/replicasets": frozenset({"status.replicas"}),
}


def parse_field_selector(text: str | None, gr: str) -> tuple[FieldRequirement, ...]:
    if not text:
        return ()
    allowed = SELECTABLE_FIELDS.get(gr, frozenset())
    reqs: list[FieldRequirement] = []
    for term in _split_top_level(text):
        if "!=" in term:
            path, value = term.split("!=", 1)
            negate = True
        elif "==" in term:
            path, value = term.split("==", 1)
            negate = False
        elif "=" in term:
            path, value = term.split("=", 1)
            negate = False
        else:
            raise bad_request(f"invalid field selector: {term!r}")
        path = path.strip()
        if path not in ("metadata.name", "metadata.namespace") and path not in allowed:
            raise bad_request(f'field label not supported: {path}')
        reqs.append(FieldRequirement(path, value.strip(), negate))
    return tuple(reqs)


def _event_source(obj: dict[str, Any]) -> str:
    """An Event's `source` field: its source component, else its reporting controller
    (an Event written through events.k8s.io), as Kubernetes selects it."""
    return (obj.get("source") or {}).get("component", "") or str(
        obj.get("reportingComponent") or "")


# Field names of another API version of the same stored object.
_FIELD_ALIASES = {"reportingController": "reportingComponent"}


# Unset fields that select as their default value, as in Kubernetes.
_FIELD_DEFAULTS = {"spec.unschedulable": "false"}


def fields_match(reqs: tuple[FieldRequirement, ...], obj: dict[str, Any]) -> bool:
    for r in reqs:
        actual = _event_source(obj) if r.path == "source" else field_value(
            obj, _FIELD_ALIASES.get(r.path, r.path))
        if not actual and r.path in _FIELD_DEFAULTS:
            actual = _FIELD_DEFAULTS[r.path]
        if (actual == r.value) == r.negate:
            return False
    return True
