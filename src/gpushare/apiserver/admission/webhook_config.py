"""MutatingWebhookConfiguration objects read into typed views, and what each webhook
matches: operations, resources (group, version, resource, scope) and the namespace's labels.

Pure: no I/O. A field that cannot be read is a `WebhookConfigError` naming it; the server
refuses such a configuration when it is written, so a stored one always reads.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT", "*"})
GR = "admissionregistration.k8s.io/mutatingwebhookconfigurations"


class WebhookConfigError(ValueError):
    """A MutatingWebhookConfiguration field that cannot be used; the message names it."""


@dataclass(frozen=True, slots=True)
class Rule:
    operations: tuple[str, ...]
    groups: tuple[str, ...]
    versions: tuple[str, ...]
    resources: tuple[str, ...]
    scope: str  # "*", "Cluster" or "Namespaced"

    def matches(self, operation: str, group: str, version: str, resource: str,
                namespaced: bool) -> bool:
        def has(values: tuple[str, ...], value: str) -> bool:
            return "*" in values or value in values

        if self.scope != "*" and self.scope != ("Namespaced" if namespaced else "Cluster"):
            return False
        return (has(self.operations, operation) and has(self.groups, group)
                and has(self.versions, version) and (has(self.resources, resource)))


@dataclass(frozen=True, slots=True)
class Expression:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist
    values: tuple[str, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        inside = present and labels[self.key] in self.values
        return inside if self.operator == "In" else not inside


@dataclass(frozen=True, slots=True)
class MutatingWebhook:
    name: str
    url: str  # https URL, or "" with a service
    service: tuple[str, str, int, str] | None  # namespace, name, port, path
    ca_bundle: bytes
    rules: tuple[Rule, ...]
    fail_closed: bool  # failurePolicy Fail (the default)
    timeout_seconds: int
    match_labels: tuple[tuple[str, str], ...]
    expressions: tuple[Expression, ...]

    def selects_namespace(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            e.matches(labels) for e in self.expressions)


def _strings(value: Any, field: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise WebhookConfigError(f"{field}: must be a list of strings")
    return tuple(value)


def _rule(raw: Any, field: str) -> Rule:
    if not isinstance(raw, dict):
        raise WebhookConfigError(f"{field}: must be an object")
    operations = _strings(raw.get("operations", []), f"{field}.operations")
    unknown = [o for o in operations if o not in OPERATIONS]
    if unknown:
        raise WebhookConfigError(f"{field}.operations: unknown {unknown}")
    scope = raw.get("scope", "*")
    if scope not in ("*", "Cluster", "Namespaced"):
        raise WebhookConfigError(f"{field}.scope: must be *, Cluster or Namespaced")
    return Rule(operations, _strings(raw.get("apiGroups", []), f"{field}.apiGroups"),
                _strings(raw.get("apiVersions", []), f"{field}.apiVersions"),
                _strings(raw.get("resources", []), f"{field}.resources"), scope)


def _selector(raw: Any, field: str) -> tuple[tuple[tuple[str, str], ...], tuple[Expression, ...]]:
    if raw is None:
        return (), ()
    if not isinstance(raw, dict):
        raise WebhookConfigError(f"{field}: must be an object")
    labels = raw.get("matchLabels") or {}
    if not isinstance(labels, dict):
        raise WebhookConfigError(f"{field}.matchLabels: must be an object")
    expressions = []
    for i, e in enumerate(raw.get("matchExpressions") or []):
        where = f"{field}.matchExpressions[{i}]"
        if not isinstance(e, dict) or not isinstance(e.get("key"), str):
            raise WebhookConfigError(f"{where}.key: required")
        if e.get("operator") not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise WebhookConfigError(f"{where}.operator: must be In, NotIn, Exists or "
                                     "DoesNotExist")
        expressions.append(Expression(e["key"], e["operator"],
                                      _strings(e.get("values") or [], f"{where}.values")))
    return tuple((str(k), str(v)) for k, v in labels.items()), tuple(expressions)


def _client(raw: Any, field: str) -> tuple[str, tuple[str, str, int, str] | None, bytes]:
    if not isinstance(raw, dict):
        raise WebhookConfigError(f"{field}: required")
    try:
        ca = base64.b64decode(raw.get("caBundle") or "", validate=True)
    except (binascii.Error, ValueError):
        raise WebhookConfigError(f"{field}.caBundle: not base64") from None
    url, service = raw.get("url"), raw.get("service")
    if (url is None) == (service is None):
        raise WebhookConfigError(f"{field}: exactly one of url and service")
    if url is not None:
        if not isinstance(url, str) or not url.startswith("https://"):
            raise WebhookConfigError(f"{field}.url: must be an https:// URL")
        return url, None, ca
    if not isinstance(service, dict) or not service.get("name") or not service.get("namespace"):
        raise WebhookConfigError(f"{field}.service: name and namespace are required")
    port = service.get("port", 443)
    if not isinstance(port, int) or not 0 < port < 65536:
        raise WebhookConfigError(f"{field}.service.port: must be 1-65535")
    return "", (service["namespace"], service["name"], port, service.get("path") or "/"), ca


def _webhook(raw: Any, field: str) -> MutatingWebhook:
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        raise WebhookConfigError(f"{field}.name: required")
    url, service, ca = _client(raw.get("clientConfig"), f"{field}.clientConfig")
    policy = raw.get("failurePolicy", "Fail")
    if policy not in ("Fail", "Ignore"):
        raise WebhookConfigError(f"{field}.failurePolicy: must be Fail or Ignore")
    timeout = raw.get("timeoutSeconds", 10)
    if not isinstance(timeout, int) or not 1 <= timeout <= 30:
        raise WebhookConfigError(f"{field}.timeoutSeconds: must be 1-30")
    versions = raw.get("admissionReviewVersions", ["v1"])
    if "v1" not in (versions or []):
        raise WebhookConfigError(f"{field}.admissionReviewVersions: must include v1")
    rules = tuple(_rule(r, f"{field}.rules[{i}]") for i, r in enumerate(raw.get("rules") or []))
    labels, expressions = _selector(raw.get("namespaceSelector"), f"{field}.namespaceSelector")
    return MutatingWebhook(raw["name"], url, service, ca, rules, policy == "Fail", timeout,
                           labels, expressions)


def parse_configuration(obj: Mapping[str, Any]) -> tuple[MutatingWebhook, ...]:
    """The webhooks of one MutatingWebhookConfiguration, in order."""
    webhooks = obj.get("webhooks") or []
    if not isinstance(webhooks, list):
        raise WebhookConfigError("webhooks: must be a list")
    return tuple(_webhook(w, f"webhooks[{i}]") for i, w in enumerate(webhooks))
