"""Admission that keeps users inside the privileges they hold.

* **Binding is the scheduler's**: only a caller allowed `create pods/binding` (the
  scheduler's identity, cluster admins) may set `spec.nodeName` or the GPU slot annotations
  the scheduler writes when it binds (`gpushare.io/gpu-indices`, `gpu-portion`,
  `gpu-memory-mib`), on create, update or patch. Everybody else gets 403 naming the field:
  a pre-bound pod would bypass queues, quotas and the GPU-slot bookkeeping.
* **RBAC escalation** (as Kubernetes' RBAC REST storage does): creating or updating a Role
  or ClusterRole needs every permission it grants, unless the caller may `escalate` it;
  creating or updating a (Cluster)RoleBinding needs every permission of the role it refers
  to (in the binding's namespace for a RoleBinding), unless the caller may `bind` that role.

The hooks run inside `Api` (see `Api.admission_hooks`); the caller of the request being
served is in `REQUEST_USER` (None for the server's own writes, which are not checked).
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from gpushare.api.contracts import (
    GPU_INDICES_ANNOTATION,
    GPU_MEMORY_MIB_ANNOTATION,
    GPU_PORTION_ANNOTATION,
)
from gpushare.api.objects import field_dict
from gpushare.apiserver.auth.access import RBAC, Attributes, Authorizer, User
from gpushare.apiserver.errors import ApiError
from gpushare.apiserver.resources import ResourceInfo

REQUEST_USER: ContextVar[User | None] = ContextVar("gpushare_request_user", default=None)

SLOT_ANNOTATIONS = (GPU_INDICES_ANNOTATION, GPU_PORTION_ANNOTATION,
                    GPU_MEMORY_MIB_ANNOTATION)
_ROLES = f"{RBAC}/roles"
_CLUSTER_ROLES = f"{RBAC}/clusterroles"
_BINDINGS = (f"{RBAC}/rolebindings", f"{RBAC}/clusterrolebindings")


def _forbidden(info: ResourceInfo, name: str, message: str, field: str = "") -> ApiError:
    qualified = f"{info.resource}.{info.group}" if info.group else info.resource
    details: dict[str, Any] = {"name": name, "kind": info.resource}
    if info.group:
        details["group"] = info.group
    if field:
        details["causes"] = [{"reason": "FieldValueForbidden", "message": message,
                              "field": field}]
    return ApiError(403, f'{qualified} "{name}" is forbidden: {message}', "Forbidden", details)


class PrivilegeAdmission:
    """`Api.admission_hooks` entry: binding fields and RBAC escalation."""

    def __init__(self, authorizer: Authorizer) -> None:
        self.authorizer = authorizer

    def __call__(self, api: Any, cluster: str, info: ResourceInfo, obj: dict[str, Any],
                 old: dict[str, Any] | None) -> None:
        user = REQUEST_USER.get()
        if user is None or user.is_admin:
            return
        gr = info.group_resource
        if gr == "pods":
            self._binding_fields(cluster, user, info, obj, old)
        elif gr in (_ROLES, _CLUSTER_ROLES):
            self._role_escalation(cluster, user, info, obj)
        elif gr in _BINDINGS:
            self._binding_escalation(api, cluster, user, info, obj, old)

    # -- pods ---------------------------------------------------------------------------------

    def _binding_fields(self, cluster: str, user: User, info: ResourceInfo,
                        obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        meta = obj.get("metadata") or {}
        ns, name = meta.get("namespace") or "", str(meta.get("name") or "")
        changed: list[str] = []
        node = (obj.get("spec") or {}).get("nodeName") if isinstance(obj.get("spec"),
                                                                     dict) else None
        old_node = ((old or {}).get("spec") or {}).get("nodeName")
        if (node or None) != (old_node or None):
            changed.append("spec.nodeName")
        annotations = field_dict(meta, "annotations")
        old_annotations = ((old or {}).get("metadata") or {}).get("annotations") or {}
        for key in SLOT_ANNOTATIONS:
            if annotations.get(key) != old_annotations.get(key):
                changed.append(f"metadata.annotations[{key}]")
        if not changed:
            return
        if self.authorizer.allowed(cluster, user, Attributes("create", "", "pods", "binding",
                                                             ns, name)):
            return
        raise _forbidden(info, name, f'User "{user.name}" may not set {changed[0]}: binding a '
                                     "pod to a node and its GPU slots is the scheduler's "
                                     "(it needs create on pods/binding)", changed[0])

    # -- RBAC ---------------------------------------------------------------------------------

    def _role_escalation(self, cluster: str, user: User, info: ResourceInfo,
                         obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        ns, name = meta.get("namespace") or "", str(meta.get("name") or "")
        if self.authorizer.allowed(cluster, user, Attributes("escalate", RBAC, info.resource,
                                                             "", ns, name)):
            return
        missing = self.missing(cluster, user, ns, obj.get("rules"))
        if missing:
            raise _forbidden(info, name, _not_held(user, missing), "rules")

    def _binding_escalation(self, api: Any, cluster: str, user: User, info: ResourceInfo,
                            obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        meta = obj.get("metadata") or {}
        ns, name = meta.get("namespace") or "", str(meta.get("name") or "")
        ref = obj.get("roleRef")
        if not isinstance(ref, dict):
            return  # validation names the field
        if old is not None and old.get("roleRef") == ref and \
                old.get("subjects") == obj.get("subjects"):
            return  # nothing granted anew
        kind, role_name = ref.get("kind"), str(ref.get("name") or "")
        resource = "clusterroles" if kind == "ClusterRole" else "roles"
        role_ns = "" if kind == "ClusterRole" else ns
        # As in Kubernetes, `bind` is asked in the binding's namespace (a Role there may
        # allow binding a given ClusterRole).
        if self.authorizer.allowed(cluster, user, Attributes("bind", RBAC, resource, "",
                                                             ns, role_name)):
            return
        role = api.store.get(cluster, f"{RBAC}/{resource}", role_ns, role_name)
        if role is None:
            raise _forbidden(info, name, f'User "{user.name}" cannot bind {kind} '
                                         f'"{role_name}": it does not exist and the user may '
                                         f'not bind {resource} "{role_name}"', "roleRef")
        missing = self.missing(cluster, user, ns, role.get("rules"))
        if missing:
            raise _forbidden(info, name, _not_held(user, missing) +
                             f' (binding {kind} "{role_name}" needs them, or bind on it)',
                             "roleRef")

    def missing(self, cluster: str, user: User, ns: str, rules: Any) -> list[str]:
        """The permissions of `rules` that `user` does not hold in `ns` (or cluster-wide)."""
        out: list[str] = []
        for rule in rules if isinstance(rules, list) else ():
            if not isinstance(rule, dict):
                continue
            verbs = [str(v) for v in rule.get("verbs") or ()]
            for url in rule.get("nonResourceURLs") or ():
                for verb in verbs:
                    if not self.authorizer.non_resource_allowed(cluster, user, str(url), verb):
                        out.append(f'{{NonResourceURLs:["{url}"], Verbs:["{verb}"]}}')
            names = [str(n) for n in rule.get("resourceNames") or ()] or [""]
            for group in rule.get("apiGroups") or ():
                for resource in rule.get("resources") or ():
                    res, _, sub = str(resource).partition("/")
                    for verb in verbs:
                        for rname in names:
                            attrs = Attributes(verb, str(group), res, sub, ns, rname)
                            if not self.authorizer.allowed(cluster, user, attrs):
                                shown = f', ResourceNames:["{rname}"]' if rname else ""
                                out.append(f'{{APIGroups:["{group}"], Resources:["{resource}"]'
                                           f'{shown}, Verbs:["{verb}"]}}')
        return out


def _not_held(user: User, missing: list[str]) -> str:
    groups = ", ".join(f'"{g}"' for g in user.groups)
    shown = "; ".join(missing[:20]) + (f"; and {len(missing) - 20} more" if len(missing) > 20
                                       else "")
    return (f'user "{user.name}" (groups=[{groups}]) is attempting to grant RBAC permissions '
            f"not currently held: {shown}")
