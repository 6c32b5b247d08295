"""A tenant plane of its own: the tenants' logical clusters served by a gpushare API server
that is not the host.

On a Kubernetes cluster the host is the cluster's kube-apiserver, which has no logical
clusters; a gpushare API server running in the cluster (``deploy/overlays/
cluster-with-tenants``) serves every tenant's at ``<its address>/clusters/<team>``. The
tenancy controller then works with two servers (``--kubeconfig``: the host,
``--tenant-kubeconfig``: that server's admin) and, besides what it does on one server:

* mirrors each VirtualCluster (its spec, under the same name) into the tenant plane's root
  cluster, which is where that server's admission reads a tenant's policy (queue pinning,
  priority classes, ``maxPods``, the API quotas); the mirror is marked
  ``tenancy.gpushare.io/plane: separate``, so that server knows the host pods are elsewhere;
* makes the tenant admin's credentials with plain Kubernetes API calls on the tenant plane
  (a ServiceAccount ``kube-system/gpushare-tenant-admin`` bound to cluster-admin in the
  tenant's cluster, a token of it by TokenRequest), and keeps the kubeconfig for it in
  the host Secret ``vc-<team>/vc-kubeconfig`` (key ``kubeconfig``), which
  ``gpushare tenant kubeconfig <team> --kubeconfig <host>`` reads.

On the host side it needs nothing but the Kubernetes API (a Secret in the tenant's host
namespace); the VirtualCluster objects stay the host's.
"""

from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import Any

import yaml

from gpushare.api.kubeconfig import kubeconfig as make_kubeconfig
from gpushare.api.objects import Meta, Obj
from gpushare.kube.client import SECRETS, ApiError, KubeClient, Resource
from gpushare.tenancy import names
from gpushare.tenancy.policy import TenantPolicy

KUBECONFIG_SECRET = "vc-kubeconfig"  # never a synced copy's name (those end in a hex hash)
KUBECONFIG_KEY = "kubeconfig"
KUBECONFIG_LABEL = f"{names.GROUP}/kubeconfig"  # not TENANT_LABEL: the syncer's copies have it
ADMIN_SA = "gpushare-tenant-admin"
ADMIN_SA_NAMESPACE = "kube-system"
ADMIN_SA_BINDING = "tenancy:tenant-admin"
# The token of the kubeconfig: a year; renewed once half of it has gone.
TOKEN_SECONDS = 365 * 24 * 3600
ISSUED_ANNOTATION = f"{names.GROUP}/issued"

VIRTUALCLUSTERS = Resource(names.API_VERSION, names.PLURAL, False)
SERVICEACCOUNTS = Resource("v1", "serviceaccounts", True)
CLUSTERROLEBINDINGS = Resource("rbac.authorization.k8s.io/v1", "clusterrolebindings", False)


def server_of(kubeconfig: str) -> str:
    """The server a kubeconfig (``""``: in-cluster) points at, without a logical cluster."""
    client = KubeClient.from_kubeconfig(kubeconfig, pool_size=1)
    try:
        return client.host.split("/clusters/", 1)[0].rstrip("/")
    finally:
        client.close()


def separate(kubeconfig: str, tenant_kubeconfig: str | None) -> bool:
    """Whether the tenants' clusters are served by another server than the host."""
    return bool(tenant_kubeconfig) and server_of(kubeconfig) != server_of(str(tenant_kubeconfig))


class TenantPlane:
    """The tenant plane's root cluster, seen with its admin's kubeconfig."""

    def __init__(self, tenant_kubeconfig: str) -> None:
        self.root = KubeClient.from_kubeconfig(tenant_kubeconfig, pool_size=4)
        self.server = self.root.host.split("/clusters/", 1)[0].rstrip("/")
        ca_file = self.root.api_client.configuration.ssl_ca_cert
        self.ca_pem = Path(ca_file).read_bytes() if ca_file else None

    def close(self) -> None:
        self.root.close()

    # -- the policy where the tenant plane's admission reads it --------------------------------

    def mirror(self, vc: Obj) -> str | None:
        """Keep the tenant plane's copy of ``vc`` current; why it cannot be, or None."""
        meta = Meta.of(vc)
        name = meta.name
        want: Obj = {"apiVersion": names.API_VERSION, "kind": names.KIND,
                     "metadata": {"name": name, "labels": dict(meta.labels),
                                  "annotations": {names.PLANE_ANNOTATION: names.SEPARATE_PLANE}},
                     "spec": vc.get("spec") or {}}
        try:
            current = self.root.get(VIRTUALCLUSTERS.item(name))
            if current is None:
                self.root.create(VIRTUALCLUSTERS.collection(), want)
            elif (current.get("spec") != want["spec"]
                  or Meta.of(current).annotations.get(
                      names.PLANE_ANNOTATION) != names.SEPARATE_PLANE):
                want["metadata"]["resourceVersion"] = Meta.of(current).resource_version
                self.root.replace(VIRTUALCLUSTERS.item(name), want)
        except ApiError as error:
            if error.status in (400, 401, 403, 422):
                return (f"the tenant plane refuses its copy of the VirtualCluster ({error}); "
                        "--tenant-kubeconfig must be that server's admin")
            raise
        return None

    def forget(self, name: str) -> None:
        try:
            self.root.delete(VIRTUALCLUSTERS.item(name))
        except ApiError as error:
            if error.status != 404:
                raise

    # -- the tenant admin's kubeconfig -----------------------------------------------------

    def publish_kubeconfig(self, host: KubeClient, tenant: KubeClient,
                           policy: TenantPolicy) -> None:
        """Make (or renew, past half its life) the tenant admin's kubeconfig Secret."""
        host_ns = names.host_namespace(policy.name)
        path = SECRETS.item(KUBECONFIG_SECRET, host_ns)
        current = host.get(path)
        if current is not None and _fresh(current, policy.uid):
            return
        token = self._admin_token(tenant)
        config = make_kubeconfig(f"{self.server}/clusters/{policy.name}", token,
                                 names.admin_user(policy.name), context=policy.name,
                                 ca_pem=self.ca_pem)
        secret: Obj = {
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": KUBECONFIG_SECRET, "namespace": host_ns,
                         "labels": {KUBECONFIG_LABEL: policy.name},
                         "annotations": {names.TENANT_UID_ANNOTATION: policy.uid,
                                         ISSUED_ANNOTATION: str(int(time.time()))}},
            "data": {KUBECONFIG_KEY: base64.b64encode(
                yaml.safe_dump(config, sort_keys=False).encode()).decode()}}
        if current is None:
            host.create(SECRETS.collection(host_ns), secret)
        else:
            secret["metadata"]["resourceVersion"] = Meta.of(current).resource_version
            host.replace(path, secret)

    @staticmethod
    def _admin_token(tenant: KubeClient) -> str:
        for path, body in (
            (SERVICEACCOUNTS.collection(ADMIN_SA_NAMESPACE),
             {"apiVersion": "v1", "kind": "ServiceAccount",
              "metadata": {"name": ADMIN_SA, "namespace": ADMIN_SA_NAMESPACE}}),
            (CLUSTERROLEBINDINGS.collection(),
             {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
              "metadata": {"name": ADMIN_SA_BINDING},
              "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                          "name": "cluster-admin"},
              "subjects": [{"kind": "ServiceAccount", "name": ADMIN_SA,
                            "namespace": ADMIN_SA_NAMESPACE}]}),
        ):
            try:
                tenant.create(path, body)
            except ApiError as error:
                if error.status != 409:
                    raise
        answer = tenant.create(SERVICEACCOUNTS.item(ADMIN_SA, ADMIN_SA_NAMESPACE, "token"), {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": TOKEN_SECONDS}})
        return str((answer.get("status") or {})["token"])


def _fresh(secret: Obj, uid: str) -> bool:
    annotations = Meta.of(secret).annotations
    try:
        issued = int(annotations.get(ISSUED_ANNOTATION, 0))
    except ValueError:
        return False
    return (annotations.get(names.TENANT_UID_ANNOTATION) == uid
            and time.time() - issued < TOKEN_SECONDS / 2)


def read_kubeconfig(host: KubeClient, tenant: str) -> dict[str, Any] | None:
    """The tenant admin's kubeconfig the controller keeps on the host (None: not there)."""
    secret = host.get(SECRETS.item(KUBECONFIG_SECRET, names.host_namespace(tenant)))
    if secret is None:
        return None
    data = (secret.get("data") or {}).get(KUBECONFIG_KEY)
    if not data:
        return None
    loaded = yaml.safe_load(base64.b64decode(data))
    return loaded if isinstance(loaded, dict) else None
