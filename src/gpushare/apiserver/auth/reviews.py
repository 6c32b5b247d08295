"""Reviews: who the caller is (`kubectl auth whoami`), what it may do
(`kubectl auth can-i --list`) and what another user may do (SubjectAccessReview), answered
from the token file and RBAC."""

from __future__ import annotations

from typing import Any

from gpushare.apiserver.auth.access import Attributes, Authorizer, User
from gpushare.apiserver.errors import Cause, bad_request, invalid

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


def subject_access_review(body: Any, authorizer: Authorizer, cluster: str) -> dict[str, Any]:
    """authorization.k8s.io/v1 SubjectAccessReview: may `spec.user` (with `spec.groups`) do
    what the attributes say? Asked by node agents for callers of their endpoint."""
    if not isinstance(body, dict) or not isinstance(body.get("spec"), dict):
        raise bad_request("the request body must be a SubjectAccessReview with a spec")
    spec = body["spec"]
    name, groups = spec.get("user"), spec.get("groups") or []
    if not isinstance(name, str) or not name:
        if not groups:
            raise invalid("authorization.k8s.io", "SubjectAccessReview", "",
                          [Cause("spec.user", "at least one of user or group must be "
                                 "specified", "FieldValueRequired")])
        name = ""
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        raise invalid("authorization.k8s.io", "SubjectAccessReview", "",
                      [Cause("spec.groups", "must be a list of strings")])
    user = User(name, tuple(groups))
    ra, nra = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if isinstance(ra, dict):
        attrs = Attributes(str(ra.get("verb", "")), str(ra.get("group", "")),
                           str(ra.get("resource", "")), str(ra.get("subresource", "")),
                           str(ra.get("namespace", "")), str(ra.get("name", "")))
        allowed = authorizer.allowed(cluster, user, attrs)
    elif isinstance(nra, dict):
        allowed = authorizer.non_resource_allowed(cluster, user, str(nra.get("path", "")),
                                                  str(nra.get("verb", "")))
    else:
        raise invalid("authorization.k8s.io", "SubjectAccessReview", "",
                      [Cause("spec.resourceAttributes", "exactly one of nonResourceAttributes "
                             "or resourceAttributes must be specified", "FieldValueRequired")])
    status: dict[str, Any] = {"allowed": allowed}
    if not allowed:
        status["reason"] = "no RBAC rule allows it"
    return {"kind": "SubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": None}, "spec": spec, "status": status}
