"""The tenancy controller: VirtualCluster objects on the host → running virtual clusters.

For each VirtualCluster it

* provisions the tenant: the host namespace ``vc-<name>`` (labelled as the tenant's), and
  inside the tenant cluster its system namespaces, the Queue/PodGroup CRDs, the
  ``cluster-admin``/``edit``/``view`` ClusterRoles and a binding that makes the holders of
  the tenant's admin token (the group ``tenancy.gpushare.io:<uid>:admins``) cluster-admin
  there — and nowhere else, since the token is valid for that logical cluster only;
* runs its syncer (``syncer.TenantSyncer``) and the tenant's own workload controllers
  (Jobs, ReplicaSets, Deployments), so its Jobs make pods inside the tenant;
* pauses and resumes it (``spec.paused``);
* writes ``status``: phase (Pending, Ready, Paused, Deleting, Failed), endpoint, host
  namespace, live pods, GPUs held on the host;
* on deletion (finalizer ``tenancy.gpushare.io/cleanup``) removes everything of the tenant:
  its host namespace with every host object in it, then every object inside the tenant
  cluster, and only then lets the VirtualCluster go. Nothing outside the tenant's host
  namespace and logical cluster is touched.

Everything goes through the Kubernetes API: the host's with the controllers' kubeconfig,
the tenant's at ``<server>/clusters/<name>`` of the tenant kubeconfig's server. When that
is another server than the host (a Kubernetes cluster, whose tenants have a gpushare API
server of their own), ``plane.TenantPlane`` adds what that takes: the policy mirrored where
that server's admission reads it and the tenant admin's kubeconfig in a host Secret.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from gpushare.api.crds import podgroup_crd, queue_crd
from gpushare.api.objects import Meta, Obj
from gpushare.api.quantity import format_milli
from gpushare.api.timefmt import rfc3339
from gpushare.kube.client import (
    EVENTS,
    NAMESPACES,
    NODES,
    PODGROUPS,
    PODS,
    PRIORITY_CLASSES,
    QUEUES,
    ApiError,
    KubeClient,
    Resource,
    Stopper,
)
from gpushare.kube.informer import WorkQueue, start_workers
from gpushare.kube.informers import InformerFactory
from gpushare.tenancy import metrics, names
from gpushare.tenancy.plane import TenantPlane, separate
from gpushare.tenancy.policy import TenantPolicy
from gpushare.tenancy.syncer import HostViews, TenantSyncer

log = logging.getLogger(__name__)

VIRTUALCLUSTERS = Resource(names.API_VERSION, names.PLURAL, False)
CRDS = Resource("apiextensions.k8s.io/v1", "customresourcedefinitions", False)
CLUSTERROLES = Resource("rbac.authorization.k8s.io/v1", "clusterroles", False)
CLUSTERROLEBINDINGS = Resource("rbac.authorization.k8s.io/v1", "clusterrolebindings", False)
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
ADMINS_BINDING = "tenancy:cluster-admins"
STATUS_PERIOD = 1.0
WORKERS = 4

_READ = ["get", "list", "watch"]
_WRITE = ["create", "update", "patch", "delete", "deletecollection"]
_VIEW_RESOURCES = ["pods", "pods/log", "pods/status", "configmaps", "services", "endpoints",
                   "events", "namespaces", "nodes", "serviceaccounts", "persistentvolumeclaims",
                   "jobs", "cronjobs", "deployments", "replicasets", "statefulsets",
                   "daemonsets", "podgroups", "queues", "priorityclasses", "leases",
                   "customresourcedefinitions"]


def tenant_roles() -> list[Obj]:
    """The ClusterRoles every tenant cluster starts with."""
    def role(name: str, rules: list[Obj]) -> Obj:
        return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": name, "labels": {names.VIEW_LABEL: "bootstrap"}},
                "rules": rules}
    return [
        role("cluster-admin", [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                               {"nonResourceURLs": ["*"], "verbs": ["*"]}]),
        role("edit", [{"apiGroups": ["*"], "resources": [*_VIEW_RESOURCES, "secrets",
                                                         "pods/eviction"],
                       "verbs": [*_READ, *_WRITE]}]),
        role("view", [{"apiGroups": ["*"], "resources": _VIEW_RESOURCES, "verbs": _READ}]),
    ]


def tenant_client(kubeconfig: str, tenant: str) -> KubeClient:
    """A client for the logical cluster ``tenant`` of the server in ``kubeconfig``."""
    return KubeClient.from_kubeconfig(kubeconfig, pool_size=16, cluster=tenant)


class TenancyController:
    name = "tenancy"

    def __init__(self, client: KubeClient, informers: InformerFactory, stopper: Stopper,
                 kubeconfig: str, *, tenant_kubeconfig: str | None = None,
                 workload_controllers: bool = True) -> None:
        self.client = client
        self.stopper = stopper
        self.kubeconfig = kubeconfig
        self.tenant_kubeconfig = tenant_kubeconfig or kubeconfig
        self.workload_controllers = workload_controllers
        self.plane = (TenantPlane(self.tenant_kubeconfig)
                      if separate(kubeconfig, tenant_kubeconfig) else None)
        self._mirrored: dict[str, tuple[str, object]] = {}  # tenant -> (uid, generation)
        self.vcs = informers.get(VIRTUALCLUSTERS)
        self.h = HostViews(pods=informers.get(PODS), events=informers.get(EVENTS),
                           podgroups=informers.get(PODGROUPS), nodes=informers.get(NODES),
                           queues=informers.get(QUEUES),
                           priority_classes=informers.get(PRIORITY_CLASSES))
        self.queue = WorkQueue()
        self.syncers: dict[str, TenantSyncer] = {}
        self._provisioned: dict[str, str] = {}  # tenant -> uid provisioned
        self._lock = threading.Lock()
        self.vcs.add_handler(lambda kind, vc, old: self.queue.add(
            Meta.of(vc).name))
        self.h.pods.add_handler(self._dispatch("on_host_pod"))
        self.h.events.add_handler(self._dispatch("on_host_event"))
        for informer in (self.h.nodes, self.h.queues, self.h.priority_classes):
            informer.add_handler(lambda *_: self._all_views_changed())

    def start(self) -> list[threading.Thread]:
        threads = start_workers(self.queue, self.reconcile, self.stopper, self.name, WORKERS)
        ticker = threading.Thread(target=self._tick, name="tenancy-status", daemon=True)
        ticker.start()
        return [*threads, ticker]

    def stop(self) -> None:
        with self._lock:
            syncers = list(self.syncers.values())
            self.syncers.clear()
        for syncer in syncers:
            syncer.stop()
        if self.plane is not None:
            self.plane.close()

    # -- routing host changes to the tenant's syncer ----------------------------------------

    def _dispatch(self, method: str) -> Any:
        def handler(kind: str, obj: Obj, old: Obj | None) -> None:
            tenant = names.tenant_of_namespace(Meta.of(obj).namespace)
            syncer = self.syncers.get(tenant) if tenant else None
            if syncer is not None and syncer.ready.is_set():
                getattr(syncer, method)(kind, obj, old)
            if method == "on_host_pod" and self.h.usage.update(kind, obj):
                # GPUs held on a node change its tenants' views: the pod's own at once,
                # every other tenant's share of the node within a second.
                if syncer is not None and syncer.ready.is_set():
                    syncer.view_changed()
                for other in list(self.syncers.values()):
                    if other is not syncer and other.ready.is_set():
                        other.view_changed(1.0)
        return handler

    def _all_views_changed(self) -> None:
        for syncer in list(self.syncers.values()):
            if syncer.ready.is_set():
                syncer.view_changed(0.5)

    def _tick(self) -> None:
        while not self.stopper.wait(STATUS_PERIOD):
            keys = self.vcs.keys()
            for key in keys:
                self.queue.add(key)

    # -- reconcile --------------------------------------------------------------------------

    def reconcile(self, name: str) -> None:
        vc = self.vcs.get(name)
        if vc is None:
            self._stop_syncer(name)
            metrics.forget(name)
            return
        policy = TenantPolicy.from_object(vc)
        meta = Meta.of(vc)
        if policy.deleting:
            self._delete(vc, policy)
            return
        if names.FINALIZER not in meta.finalizers:
            self.client.merge_patch(VIRTUALCLUSTERS.item(name), {"metadata": {
                "finalizers": [*meta.finalizers, names.FINALIZER]}})
            return  # the watch brings the object back with its finalizer
        problem = self._mirror(vc, policy)
        if problem is None and self._provisioned.get(name) != policy.uid:
            problem = self._provision(policy)
            if problem is None:
                self._provisioned[name] = policy.uid
        syncer = self.syncers.get(name)
        if problem is None and (syncer is None or syncer.uid != policy.uid):
            self._stop_syncer(name)
            syncer = TenantSyncer(policy, self.client, self.h,
                                  tenant_client(self.tenant_kubeconfig, name),
                                  workload_controllers=self.workload_controllers)
            try:
                syncer.start()
            except Exception:
                syncer.stop()
                raise
            with self._lock:
                self.syncers[name] = syncer
        elif syncer is not None:
            syncer.set_policy(policy)
        self._write_status(vc, policy, problem)

    # -- provisioning -------------------------------------------------------------------------

    def _mirror(self, vc: Obj, policy: TenantPolicy) -> str | None:
        """A separate tenant plane: its copy of the policy, kept current."""
        if self.plane is None:
            return None
        seen = (policy.uid, Meta.of(vc).generation)
        if self._mirrored.get(policy.name) == seen:
            return None
        problem = self.plane.mirror(vc)
        if problem is None:
            self._mirrored[policy.name] = seen
        return problem

    def _provision(self, policy: TenantPolicy) -> str | None:
        """Make what the tenant needs on both sides; a reason it cannot be, or None."""
        host_ns = names.host_namespace(policy.name)
        ns = self.client.get(NAMESPACES.item(host_ns))
        if ns is None:
            self._create(self.client, NAMESPACES.collection(), {
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": host_ns, "labels": {names.TENANT_LABEL: policy.name}}})
        elif Meta.of(ns).labels.get(names.TENANT_LABEL) != \
                policy.name:
            return (f"host namespace {host_ns} exists and does not belong to virtual cluster "
                    f"{policy.name}")
        elif Meta.of(ns).deleting:
            return f"host namespace {host_ns} is still being deleted"
        tenant = tenant_client(self.tenant_kubeconfig, policy.name)
        try:
            for ns_name in SYSTEM_NAMESPACES:
                self._create(tenant, NAMESPACES.collection(), {
                    "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns_name}})
            for crd in (queue_crd(), podgroup_crd()):
                self._create(tenant, CRDS.collection(), crd)
            for role in tenant_roles():
                self._create(tenant, CLUSTERROLES.collection(), role)
            binding: Obj = {
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": ADMINS_BINDING},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": "cluster-admin"},
                "subjects": [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io",
                              "name": names.admins_group(policy.uid)}]}
            current = tenant.get(CLUSTERROLEBINDINGS.item(ADMINS_BINDING))
            if current is None:
                self._create(tenant, CLUSTERROLEBINDINGS.collection(), binding)
            elif current.get("subjects") != binding["subjects"]:
                binding["metadata"]["resourceVersion"] = Meta.of(current).resource_version
                tenant.replace(CLUSTERROLEBINDINGS.item(ADMINS_BINDING), binding)
            if self.plane is not None:
                self.plane.publish_kubeconfig(self.client, tenant, policy)
        finally:
            tenant.close()
        return None

    @staticmethod
    def _create(client: KubeClient, path: str, body: Obj) -> None:
        try:
            client.create(path, body)
        except ApiError as error:
            if error.status != 409:
                raise

    def _stop_syncer(self, name: str) -> None:
        with self._lock:
            syncer = self.syncers.pop(name, None)
        if syncer is not None:
            syncer.stop()

    # -- status -------------------------------------------------------------------------------

    def _write_status(self, vc: Obj, policy: TenantPolicy, problem: str | None) -> None:
        name = policy.name
        syncer = self.syncers.get(name)
        host_ns = names.host_namespace(name)
        gpu = sum(self.h.usage.namespace(host_ns).values())
        pods = 0
        if syncer is not None:
            pods = sum(1 for p in syncer.pods.items()
                       if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
                       and not Meta.of(p).deleting)
        missing = [q for q in policy.queues if self.h.queues.get(q) is None]
        if problem is not None:
            phase, message = "Failed", problem
        elif syncer is None:
            phase, message = "Pending", "starting"
        elif policy.paused:
            phase, message = "Paused", "its pods are off the host until it is resumed"
        elif missing:
            phase, message = "Pending", f"queue(s) {', '.join(missing)} do not exist on the host"
        else:
            phase, message = "Ready", ""
        status = {"phase": phase, "endpoint": self._endpoint(name), "hostNamespace": host_ns,
                  "pods": pods, "gpuAllocated": format_milli(gpu),
                  "observedGeneration": Meta.of(vc).generation or 1,
                  "logsAndExec": "HostAdminOnly" if self.plane is not None else "Served",
                  "conditions": [self._logs_condition(vc)]}
        if message:
            status["message"] = message
        metrics.TENANT_PODS.labels(name).set(pods)
        metrics.TENANT_GPU_ALLOCATED.labels(name).set(gpu / 1000)
        for p in ("Pending", "Ready", "Paused", "Deleting", "Failed"):
            metrics.TENANT_PHASE.labels(name, p).set(1 if p == phase else 0)
        if (vc.get("status") or {}) == status:
            return
        try:
            self.client.merge_patch(VIRTUALCLUSTERS.item(name, None, "status"), {"status": status})
        except ApiError as error:
            if error.status != 404:
                raise

    def _endpoint(self, name: str) -> str:
        return f"{self.plane.server}/clusters/{name}" if self.plane else f"/clusters/{name}"

    def _logs_condition(self, vc: Obj) -> Obj:
        """Whether the tenant's kubectl logs and exec reach its pods: they do through the
        API server that holds both the tenant pod and its host pod, not from a tenant plane
        of its own (it cannot reach the host's kubelets)."""
        old = {c.get("type"): c for c in (vc.get("status") or {}).get("conditions") or ()
               if isinstance(c, dict)}.get("LogsAndExec") or {}
        if self.plane is None:
            want = {"type": "LogsAndExec", "status": "True", "reason": "SameServer",
                    "message": "kubectl logs and exec of a tenant pod reach its host pod"}
        else:
            want = {"type": "LogsAndExec", "status": "False", "reason": "SeparateTenantPlane",
                    "message": "the host is another cluster: the tenant plane cannot reach "
                               "its kubelets; logs and exec go through the host's admin "
                               f"(kubectl -n {names.host_namespace(Meta.of(vc).name)}"
                               " logs|exec ...)"}
        same = all(old.get(k) == v for k, v in want.items())
        return {**want, "lastTransitionTime": old.get("lastTransitionTime") if same
                else rfc3339(time.time())}

    # -- deletion -----------------------------------------------------------------------------

    def _delete(self, vc: Obj, policy: TenantPolicy) -> None:
        name = policy.name
        meta = Meta.of(vc)
        if names.FINALIZER not in meta.finalizers:
            return
        self._stop_syncer(name)
        self._provisioned.pop(name, None)
        if (vc.get("status") or {}).get("phase") != "Deleting":
            self.client.merge_patch(VIRTUALCLUSTERS.item(name, None, "status"),
                                    {"status": {**(vc.get("status") or {}), "phase": "Deleting",
                                                "message": "removing its objects"}})
        host_ns = names.host_namespace(name)
        ns = self.client.get(NAMESPACES.item(host_ns))
        if ns is not None and Meta.of(ns).labels.get(
                names.TENANT_LABEL) == name:
            if not Meta.of(ns).deleting:
                self.client.delete(NAMESPACES.item(host_ns))
            self.queue.add_after(name, 0.5)
            return
        tenant = tenant_client(self.tenant_kubeconfig, name)
        try:
            if purge_cluster(tenant):
                self.queue.add_after(name, 0.5)
                return
        finally:
            tenant.close()
        if self.plane is not None:
            self.plane.forget(name)
            self._mirrored.pop(name, None)
        finalizers = [f for f in meta.finalizers if f != names.FINALIZER]
        self.client.merge_patch(VIRTUALCLUSTERS.item(name), {"metadata": {
            "finalizers": finalizers or None, "resourceVersion": meta.resource_version or None}})
        metrics.forget(name)


def purge_cluster(client: KubeClient) -> bool:
    """Delete every object of the cluster ``client`` points at; True while some remain."""
    remaining = False
    namespaces = (client.list(NAMESPACES.collection()).get("items") or [])
    for ns in namespaces:
        remaining = True
        name = Meta.of(ns).name
        # Tenant pods have no node of their own to finish them: they go at once (their host
        # pods, which ran, are already gone with the host namespace).
        for pod in client.list(PODS.collection(name)).get("items") or ():
            client.delete(PODS.item(Meta.of(pod).name, name), grace_period_seconds=0)
        if not Meta.of(ns).deleting:
            client.delete(NAMESPACES.item(name))
    if remaining:
        return True
    for resource in _cluster_scoped(client):
        listing = client.list(resource.collection())
        for item in listing.get("items") or ():
            remaining = True
            client.delete(resource.item(Meta.of(item).name))
    return remaining


def _cluster_scoped(client: KubeClient) -> list[Resource]:
    """Every cluster-scoped resource (but namespaces) the cluster serves, CRDs last (so
    their objects go with them only after the rest)."""
    out: list[Resource] = []
    lists = [("v1", client.list("/api/v1"))]
    for group in (client.list("/apis").get("groups") or ()):
        preferred = (group.get("preferredVersion") or {}).get("groupVersion")
        if preferred:
            lists.append((preferred, client.list(f"/apis/{preferred}")))
    for gv, listing in lists:
        for r in listing.get("resources") or ():
            if "/" in r.get("name", "") or r.get("namespaced") or r.get("name") == "namespaces":
                continue
            if "delete" not in (r.get("verbs") or ()) or "list" not in (r.get("verbs") or ()):
                continue
            out.append(Resource(gv, r["name"], False))
    out.sort(key=lambda r: r.plural == "customresourcedefinitions")
    return out
