"""Self reviews: who the caller is (`kubectl auth whoami`) and what it may do
(`kubectl auth can-i --list`), answered from the token file and RBAC."""

from __future__ import annotations

from typing import Any

from gpushare.apiserver.auth import Authorizer, User
from gpushare.apiserver.errors import bad_request

_ALL = ["*"]


def self_subject_review(body: Any, user: User) -> dict[str, Any]:
    """authentication.k8s.io/v1 SelfSubjectReview with the caller's user info."""
    if body is not None and not isinstance(body, dict):
        raise bad_request("the request body must be a SelfSubjectReview")
    return {"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"creationTimestamp": None},
            "status": {"userInfo": {"username": user.name, "groups": list(user.groups)}}}


def self_subject_rules_review(body: Any, user: User, authorizer: Authorizer,
                              cluster: str) -> dict[str, Any]:
    """authorization.k8s.io/v1 SelfSubjectRulesReview: the caller's rules in a namespace."""
    if not isinstance(body, dict):
        raise bad_request("the request body must be a SelfSubjectRulesReview")
    namespace = str((body.get("spec") or {}).get("namespace") or "")
    resource_rules: list[dict[str, Any]] = []
    non_resource_rules: list[dict[str, Any]] = []
    if user.is_admin:
        resource_rules.append({"verbs": _ALL, "apiGroups": _ALL, "resources": _ALL})
        non_resource_rules.append({"verbs": _ALL, "nonResourceURLs": _ALL})
    else:
        # What every authenticated user may do, as Kubernetes' default roles grant.
        resource_rules.append({"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
                               "resources": ["selfsubjectaccessreviews",
                                             "selfsubjectrulesreviews"]})
        resource_rules.append({"verbs": ["create"], "apiGroups": ["authentication.k8s.io"],
                               "resources": ["selfsubjectreviews"]})
        non_resource_rules.append({"verbs": ["get"], "nonResourceURLs": [
            "/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi",
            "/openapi/*", "/readyz", "/version", "/version/"]})
        for rules in authorizer.rules(cluster, user, namespace):
            for rule in rules:
                if not isinstance(rule, dict):
                    continue
                if rule.get("nonResourceURLs"):
                    non_resource_rules.append({"verbs": list(rule.get("verbs") or ()),
                                               "nonResourceURLs": list(rule["nonResourceURLs"])})
                    continue
                entry: dict[str, Any] = {"verbs": list(rule.get("verbs") or ()),
                                         "apiGroups": list(rule.get("apiGroups") or ()),
                                         "resources": list(rule.get("resources") or ())}
                if rule.get("resourceNames"):
                    entry["resourceNames"] = list(rule["resourceNames"])
                resource_rules.append(entry)
    return {"kind": "SelfSubjectRulesReview", "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": None}, "spec": {"namespace": namespace},
            "status": {"resourceRules": resource_rules, "nonResourceRules": non_resource_rules,
                       "incomplete": False}}
