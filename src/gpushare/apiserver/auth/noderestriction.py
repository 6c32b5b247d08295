"""A node agent acts for its own node only (Kubernetes' Node authorizer and NodeRestriction
admission, for gpushare's node identities).

A node agent authenticates as `system:node:<node>` in group `system:nodes` (`gpushare up`
issues that identity; `components.node_identity`). RBAC gives every node the same role
(`gpushare-agent`); this narrows it to what the node itself needs, in the root cluster:

* **Nodes**: it writes (update, patch, delete, its status) only the Node of its name, and
  creates only that one; it reads any (as kubelets do).
* **Pods**: it reads, deletes and writes the status and annotations of the pods bound to
  it (`spec.nodeName`) only, and changes nothing else of them (spec, labels, owners,
  finalizers); listing and watching stay allowed (it watches its own with a field
  selector).
* **Secrets, ConfigMaps, PersistentVolumeClaims, ServiceAccounts** (and their tokens): by
  name only, and only those a pod bound to it references (volumes, projected sources,
  env and envFrom, image pull secrets, the pod's ServiceAccount); never listed or watched.
  The public `kube-root-ca.crt` ConfigMap is readable everywhere.
* **Services and EndpointSlices**: read, listed and watched in every namespace, as
  kube-proxy and the cluster DNS do (the node's pod network routes Services' ClusterIPs
  and names them); RBAC gives no write.

Anything else the role allows (Events, its certificate requests, reviews) is left to RBAC.
Other identities are untouched. Refusals are 403 naming the node and the rule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpushare.apiserver.auth.access import ROOT_CLUSTER
from gpushare.apiserver.auth.privilege import REQUEST_USER
from gpushare.apiserver.errors import ApiError

if TYPE_CHECKING:
    from gpushare.apiserver.auth.access import Attributes, User
    from gpushare.apiserver.resources import ResourceInfo

NODE_PREFIX = "system:node:"
NODES_GROUP = "system:nodes"
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
_WRITES = {"create", "update", "patch", "delete", "deletecollection"}
_BY_REFERENCE = {"secrets", "configmaps", "persistentvolumeclaims", "serviceaccounts"}


def node_of(user: User | None) -> str | None:
    """The node a node identity acts for (None: not a node)."""
    if user is None or NODES_GROUP not in user.groups or not user.name.startswith(NODE_PREFIX):
        return None
    return user.name[len(NODE_PREFIX):] or None


def _names(items: Any, key: str = "name") -> set[str]:
    return {str(i[key]) for i in items or () if isinstance(i, dict) and i.get(key)}


def pod_references(pod: dict[str, Any]) -> dict[str, set[str]]:
    """The Secrets, ConfigMaps, PVCs and ServiceAccount a pod's spec names, by resource."""
    raw = pod.get("spec")
    spec: dict[str, Any] = raw if isinstance(raw, dict) else {}
    refs: dict[str, set[str]] = {r: set() for r in _BY_REFERENCE}
    refs["serviceaccounts"].add(str(spec.get("serviceAccountName") or "default"))
    refs["secrets"] |= _names(spec.get("imagePullSecrets"))
    for volume in spec.get("volumes") or ():
        if not isinstance(volume, dict):
            continue
        refs["secrets"] |= _names([volume.get("secret")], "secretName")
        refs["configmaps"] |= _names([volume.get("configMap")])
        refs["persistentvolumeclaims"] |= _names([volume.get("persistentVolumeClaim")],
                                                 "claimName")
        projected = volume.get("projected")
        sources = projected.get("sources") if isinstance(projected, dict) else None
        for source in sources or ():
            if isinstance(source, dict):
                refs["secrets"] |= _names([source.get("secret")])
                refs["configmaps"] |= _names([source.get("configMap")])
    for group in ("containers", "initContainers", "ephemeralContainers"):
        for container in spec.get(group) or ():
            if not isinstance(container, dict):
                continue
            for source in container.get("envFrom") or ():
                if isinstance(source, dict):
                    refs["secrets"] |= _names([source.get("secretRef")])
                    refs["configmaps"] |= _names([source.get("configMapRef")])
            for env in container.get("env") or ():
                value_from = env.get("valueFrom") if isinstance(env, dict) else None
                if isinstance(value_from, dict):
                    refs["secrets"] |= _names([value_from.get("secretKeyRef")])
                    refs["configmaps"] |= _names([value_from.get("configMapKeyRef")])
    return refs


class NodeAuthorizer:
    """`App.request_policies` entry: what a node identity may reach beyond its RBAC."""

    def __init__(self, api: Any) -> None:
        self.api = api  # the server's Api (its store)

    def _bound(self, node: str, ns: str | None = None) -> list[dict[str, Any]]:
        pods = self.api.store.list_indexed(ROOT_CLUSTER, "pods", "spec.nodeName", node) or []
        return [p for p in pods if ns is None or p["metadata"].get("namespace") == ns]

    def __call__(self, cluster: str, user: User, attrs: Attributes) -> str | None:
        node = node_of(user)
        if node is None or cluster != ROOT_CLUSTER or attrs.group != "":
            return None
        why = self._refusal(node, user, attrs)
        if why is None:
            return None
        shown = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
        return f'{shown} "{attrs.name}" is forbidden: {why}'

    def _refusal(self, node: str, user: User, attrs: Attributes) -> str | None:
        who = f"node {node!r} ({user.name})"
        if attrs.resource == "nodes":
            if attrs.verb == "deletecollection" or (
                    attrs.verb in _WRITES and attrs.name and attrs.name != node):
                return f"{who} may write only its own Node, not {attrs.name or 'all'!r}"
            return None
        if attrs.resource == "pods":
            if attrs.verb in ("list", "watch"):
                return None
            if attrs.verb in ("deletecollection", "create") and not attrs.subresource:
                return f"{who} may not {attrs.verb} pods"
            pod = self.api.store.get(ROOT_CLUSTER, "pods", attrs.namespace, attrs.name)
            if pod is None:
                return None  # the request answers 404 itself
            if (pod.get("spec") or {}).get("nodeName") != node:
                return (f"{who} may {attrs.verb} only pods bound to it; "
                        f"{attrs.namespace}/{attrs.name} is not")
            return None
        if attrs.resource in _BY_REFERENCE:
            if attrs.resource == "configmaps" and attrs.name == ROOT_CA_CONFIGMAP and \
                    attrs.verb == "get":
                return None
            if not attrs.name or attrs.verb not in ("get", "create"):
                return f"{who} may only get {attrs.resource} its pods reference, by name"
            if attrs.verb == "create" and attrs.subresource != "token":
                return f"{who} may not create {attrs.resource}"
            for pod in self._bound(node, attrs.namespace):
                if attrs.name in pod_references(pod)[attrs.resource]:
                    return None
            return (f"{who} may reach {attrs.resource} only as a pod bound to it references "
                    f"them; no such pod references {attrs.namespace}/{attrs.name}")
        return None


class NodeRestriction:
    """`Api.admission_hooks` entry: a node creates and updates only its own Node object."""

    def __call__(self, api: Any, cluster: str, info: ResourceInfo, obj: dict[str, Any],
                 old: dict[str, Any] | None) -> None:
        node = node_of(REQUEST_USER.get())
        if node is None or cluster != ROOT_CLUSTER:
            return
        if info.group_resource == "pods" and old is not None:
            self._pod_write(node, obj, old)
            return
        if info.group_resource != "nodes":
            return
        name = (obj.get("metadata") or {}).get("name")
        if name != node:
            raise ApiError(403, f'nodes "{name}" is forbidden: node {node!r} may only '
                                f"create or change its own Node", "Forbidden",
                           {"name": str(name), "kind": "nodes"})

    @staticmethod
    def _pod_write(node: str, obj: dict[str, Any], old: dict[str, Any]) -> None:
        """A node changes a pod's status and annotations, nothing else of it."""
        meta, old_meta = obj.get("metadata") or {}, old.get("metadata") or {}
        changed = [f"metadata.{k}" for k in ("labels", "ownerReferences", "finalizers")
                   if meta.get(k) != old_meta.get(k)]
        if obj.get("spec") != old.get("spec"):
            changed.append("spec")
        if changed:
            name = str(meta.get("name"))
            raise ApiError(403, f'pods "{name}" is forbidden: node {node!r} may change only '
                                f"a pod's status and annotations, not {', '.join(changed)}",
                           "Forbidden", {"name": name, "kind": "pods"})
