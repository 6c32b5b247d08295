"""The control plane's own components and their identities, as kube-apiserver bootstraps
``system:kube-scheduler`` and ``system:kube-controller-manager``.

* ``system:gpushare-controllers`` — `gpushare controllers` (the scheduler, which alone
  binds pods, and the other controllers): a user of the root cluster holding only the
  ClusterRoles ``gpushare-controllers`` and ``gpushare-tenancy`` of
  ``controllers/rbac.yaml``. Not a cluster admin: it cannot read what the roles do not
  grant, nor grant itself more.
* ``system:gpushare-agent`` — `gpushare up`'s node agent: a user of the root cluster with
  the ClusterRole ``gpushare-agent`` of ``agent/rbac.yaml`` (its Node, the pods bound to
  it, their status, Events, what its pods reference, their ServiceAccount tokens, its
  serving certificate, the reviews of its node endpoint); never the admin's token.
* ``system:gpushare-tenancy`` — the virtual-cluster controller's credentials *inside*
  tenant clusters (``/clusters/<tenant>``, `gpushare controllers --tenant-kubeconfig`): it
  creates those clusters' namespaces, CRDs and RBAC, so it is a cluster admin
  (``system:masters``); its token is valid in every logical cluster but root.

The API server creates (and keeps current) the roles and their bindings in the root
cluster at every start, unless an admin marked one
``rbac.authorization.kubernetes.io/autoupdate: "false"``. `gpushare up` writes a
kubeconfig per identity (``controllers.kubeconfig``, ``agent.kubeconfig``,
``tenancy.kubeconfig``);
`gpushare kubeconfig --component NAME` writes one for a component run by hand.
"""

from __future__ import annotations

import secrets
from importlib import resources
from typing import TYPE_CHECKING, Any

import yaml

from gpushare.apiserver.auth.access import MASTERS, RBAC, ROOT_CLUSTER, TokenFile, User

if TYPE_CHECKING:
    from gpushare.apiserver.registry.api import Api

AUTOUPDATE = "rbac.authorization.kubernetes.io/autoupdate"
CONTROLLERS_USER = "system:gpushare-controllers"
AGENT_USER = "system:gpushare-agent"
NODE_USER_PREFIX = "system:node:"
NODES_GROUP = "system:nodes"
TENANCY_USER = "system:gpushare-tenancy"
#: `clusters:` of a token entry that is valid in every logical cluster except root.
TENANT_CLUSTERS = "!root"


#: The identity of each component, by the name `gpushare kubeconfig --component` takes.
COMPONENTS = {
    "controllers": User(CONTROLLERS_USER, (), (ROOT_CLUSTER,)),
    "agent": User(AGENT_USER, (), (ROOT_CLUSTER,)),
    "tenancy": User(TENANCY_USER, (MASTERS,), (TENANT_CLUSTERS,)),
}


#: The packages whose ``rbac.yaml`` holds their components' ClusterRoles and bindings.
ROLE_FILES = ("gpushare.controllers", "gpushare.agent")


def role_objects() -> list[dict[str, Any]]:
    """The ClusterRoles and ClusterRoleBindings of ``controllers/rbac.yaml`` and
    ``agent/rbac.yaml``, and (embedded control plane only, not in the manifests for a real
    cluster, whose kubelets are ``system:nodes`` too) the agent's role for node identities."""
    out: list[dict[str, Any]] = []
    for package in ROLE_FILES:
        text = resources.files(package).joinpath("rbac.yaml").read_text()
        out += [doc for doc in yaml.safe_load_all(text) if isinstance(doc, dict)]
    out.append({"apiVersion": f"{RBAC}/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": "gpushare-agent-nodes"},
                "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "gpushare-agent"},
                "subjects": [{"apiGroup": RBAC, "kind": "Group", "name": NODES_GROUP}]})
    return out


def _comparable(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: obj.get(k) for k in ("rules", "roleRef", "subjects")}


def bootstrap_roles(api: Api) -> None:
    """Create the components' roles and bindings in the root cluster, or bring them back to
    what this version ships (an admin opts out with the autoupdate annotation)."""
    reg = api.registry(ROOT_CLUSTER)
    for doc in role_objects():
        resource = {"ClusterRole": "clusterroles",
                    "ClusterRoleBinding": "clusterrolebindings"}[doc["kind"]]
        info = reg.get(RBAC, "v1", resource)
        assert info is not None
        name = doc["metadata"]["name"]
        body = {**doc, "metadata": {"name": name, "labels": {
            "kubernetes.io/bootstrapping": "rbac-defaults"}, "annotations": {AUTOUPDATE: "true"}}}
        stored = api.store.get(ROOT_CLUSTER, f"{RBAC}/{resource}", "", name)
        if stored is None:
            api.create(ROOT_CLUSTER, info, None, body)
            continue
        annotations = (stored.get("metadata") or {}).get("annotations") or {}
        if annotations.get(AUTOUPDATE) == "false" or _comparable(stored) == _comparable(body):
            continue
        body["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
        api.update(ROOT_CLUSTER, info, "", name, body)


def node_identity(node: str) -> User:
    """The identity of the node agent of `node`: ``system:node:<node>`` in ``system:nodes``
    (bound to the ``gpushare-agent`` ClusterRole), valid in the root cluster only."""
    return User(f"{NODE_USER_PREFIX}{node}", (NODES_GROUP,), (ROOT_CLUSTER,))


def component_token(tokens: TokenFile, identity: User) -> str:
    """The token of `identity` in `tokens`, issued now if it has none."""
    existing = tokens.token_of(identity.name)
    if existing is not None:
        return existing
    token = secrets.token_urlsafe(32)
    tokens.add(token, identity.name, list(identity.groups), list(identity.clusters or ()))
    return token
