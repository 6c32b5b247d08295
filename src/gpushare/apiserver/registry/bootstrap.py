"""What every logical cluster starts with, and what the server keeps published in it, as
kube-apiserver's bootstrap controllers do: system namespaces, the `kubernetes` Service and
its endpoints, the preinstalled PriorityClasses and CRDs, the monitoring ClusterRole, and
the ConfigMap `kube-root-ca.crt` in every namespace."""

from __future__ import annotations

from typing import Any, Protocol

from gpushare.api.crds import podgroup_crd, queue_crd
from gpushare.apiserver.auth import serviceaccounts
from gpushare.apiserver.objects import deep_copy
from gpushare.apiserver.registry import builtin_kinds
from gpushare.apiserver.registry.strategy import CRD_GR, PRIORITYCLASS_GR
from gpushare.apiserver.resources import Registry, ResourceInfo
from gpushare.apiserver.storage.store import Store

DEFAULT_CLUSTER = "root"
CLUSTERROLE_GR = "rbac.authorization.k8s.io/clusterroles"


class _Writes(Protocol):
    store: Store
    registries: dict[str, Registry]
    root_ca_pem: str

    def registry(self, cluster: str) -> Registry: ...

    def create(self, cluster: str, info: ResourceInfo, ns: str | None,
               body: Any) -> dict[str, Any]: ...

    def update(self, cluster: str, info: ResourceInfo, ns: str, name: str,
               body: Any) -> dict[str, Any]: ...

    def publish_root_ca(self, cluster: str, ns: str) -> None: ...


class Bootstrap:
    """`Api`'s bootstrap of a logical cluster (a mixin: `Api` holds the store and writes)."""

    def _ensure_monitoring_role(self: _Writes, reg: Registry) -> None:
        """The host's ``system:monitoring`` ClusterRole (also on data made before it)."""
        role = builtin_kinds.monitoring_cluster_role()
        if self.store.get(DEFAULT_CLUSTER, CLUSTERROLE_GR, "", role["metadata"]["name"]) is None:
            info = reg.get("rbac.authorization.k8s.io", "v1", "clusterroles")
            assert info is not None
            self.create(DEFAULT_CLUSTER, info, None, role)

    def _bootstrap(self: _Writes, cluster: str) -> None:
        reg = self.registries[cluster]
        ns_info = reg.get("", "v1", "namespaces")
        assert ns_info is not None
        for name in builtin_kinds.SYSTEM_NAMESPACES:
            if self.store.get(cluster, "namespaces", "", name) is None:
                self.create(cluster, ns_info, None, {"metadata": {"name": name}})
        svc_info = reg.get("", "v1", "services")
        assert svc_info is not None
        if self.store.get(cluster, "services", "default", "kubernetes") is None:
            self.create(cluster, svc_info, "default", builtin_kinds.kubernetes_service())
        pc_info = reg.get("scheduling.k8s.io", "v1", "priorityclasses")
        assert pc_info is not None
        for name, value in builtin_kinds.PRIORITY_CLASSES.items():
            if self.store.get(cluster, PRIORITYCLASS_GR, "", name) is None:
                self.create(cluster, pc_info, None, {
                    "metadata": {"name": name}, "value": value,
                    "description": f"gpushare workload class {name!r}",
                    "preemptionPolicy": "PreemptLowerPriority"})
        crd_info = reg.get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        assert crd_info is not None
        for crd in (queue_crd(), podgroup_crd()):
            if self.store.get(cluster, CRD_GR, "", crd["metadata"]["name"]) is None:
                self.create(cluster, crd_info, None, crd)

    def keep_crd(self: _Writes, cluster: str, crd: dict[str, Any]) -> None:
        """Keep `crd` installed in `cluster` as given: created when missing, its spec
        replaced when it differs (a plug-in's CRD as this version ships it)."""
        crd_info = self.registry(cluster).get("apiextensions.k8s.io", "v1",
                                              "customresourcedefinitions")
        assert crd_info is not None
        name = crd["metadata"]["name"]
        existing = self.store.get(cluster, CRD_GR, "", name)
        if existing is None:
            self.create(cluster, crd_info, None, crd)
        elif existing.get("spec") != crd["spec"]:
            rv = existing["metadata"]["resourceVersion"]
            self.update(cluster, crd_info, "", name,
                        {**crd, "metadata": {**crd["metadata"], "resourceVersion": rv}})

    def publish_root_ca(self: _Writes, cluster: str, ns: str) -> None:
        """Keep ConfigMap kube-root-ca.crt in `ns` holding the API's CA (as Kubernetes'
        root-ca-cert-publisher does), so in-cluster clients can verify the server."""
        if not self.root_ca_pem:
            return
        nsobj = self.store.get(cluster, "namespaces", "", ns)
        if nsobj is None or nsobj["metadata"].get("deletionTimestamp"):
            return
        info = self.registry(cluster).get("", "v1", "configmaps")
        assert info is not None
        name = serviceaccounts.ROOT_CA_CONFIGMAP
        current = self.store.get(cluster, "configmaps", ns, name)
        data = {"ca.crt": self.root_ca_pem}
        if current is None:
            self.create(cluster, info, ns, {"metadata": {"name": name, "annotations": {
                "kubernetes.io/description": "Contains a CA bundle that can be used to verify "
                                             "the kube-apiserver when using internal "
                                             "endpoints such as the internal service IP or "
                                             "kubernetes.default.svc."}}, "data": data})
        elif current.get("data") != data:
            obj = deep_copy(current)
            obj["data"] = data
            self.update(cluster, info, ns, name, obj)

    def publish_api_endpoints(self: _Writes, host: str, port: int) -> None:
        """The `kubernetes` Service's Endpoints and EndpointSlice in `default` (root
        cluster): the API's own address, as kube-apiserver keeps them."""
        import ipaddress

        try:
            ip = str(ipaddress.ip_address(host))
        except ValueError:
            ip = "127.0.0.1"  # a host name or a wildcard bind: the loopback answers
        if ip in ("0.0.0.0", "::"):
            ip = "127.0.0.1"
        reg = self.registry(DEFAULT_CLUSTER)
        for (group, version, resource), body in builtin_kinds.api_endpoints(ip, port).items():
            info = reg.get(group, version, resource)
            assert info is not None
            current = self.store.get(DEFAULT_CLUSTER, info.group_resource, "default",
                                     "kubernetes")
            if current is None:
                self.create(DEFAULT_CLUSTER, info, "default", body)
            elif any(current.get(k) != body[k] for k in body if k != "metadata"):
                self.update(DEFAULT_CLUSTER, info, "default", "kubernetes",
                            {**body, "metadata": current["metadata"]})

    def publish_root_ca_everywhere(self: _Writes) -> None:
        for cluster in list(self.registries):
            for ns in list(self.store.list(cluster, "namespaces")):
                self.publish_root_ca(cluster, ns["metadata"]["name"])

