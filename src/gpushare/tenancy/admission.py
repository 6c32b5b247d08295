"""The API server's side of tenancy: admission and request policy in tenant clusters.

Plugged into the API server by the process that composes it (``server_plugin``):

* in the host cluster, VirtualCluster objects are validated (fields named, nothing stored
  on a bad one) and the VirtualCluster CRD is kept installed (by the server, as given);
* in a tenant cluster, pods, workloads and PodGroups are admitted only with the queue(s)
  and priority classes its VirtualCluster allows (a pod naming no queue gets the first),
  live pods are capped at ``maxPods``, and what would reach around the host's scheduler
  or into the host machine (``nodeName``, host namespaces, ``hostPath``, privileged
  containers) is refused — each with a 403 that names the rule and what is allowed;
* in a tenant cluster, the platform's views (nodes, queues, priority classes) and the
  scheduler's verbs (binding, pod status) are read-only for everybody but the platform
  (``system:masters``);
* ``pods/log`` (and exec, port-forward) of a tenant pod is served from the host pod it is
  synced to; a tenant plane of its own (``plane.py``) refuses them with a message saying why.
"""

from __future__ import annotations

import math
from typing import Any

from gpushare.api.contracts import PRIORITY_LABEL, QUEUE_LABEL
from gpushare.api.objects import Meta, metadata
from gpushare.api.plugins import (
    Caller,
    LimitsOf,
    LogTarget,
    RequestAttributes,
    RequestPolicy,
    Resource,
    ServerApi,
    ServerPlugin,
    TenantLimits,
)
from gpushare.api.status import ApiError, invalid
from gpushare.tenancy import names
from gpushare.tenancy.policy import TenantPolicy, validate_virtual_cluster, virtualcluster_crd
from gpushare.tenancy.ratelimit import CreateRateLimiter

PRIORITYCLASS_GR = "scheduling.k8s.io/priorityclasses"
PODGROUP_GR = "scheduling.run.ai/podgroups"
QUEUE_GR = "scheduling.run.ai/queues"
WORKLOAD_TEMPLATES = {
    "batch/jobs": ("spec", "template"),
    "batch/cronjobs": ("spec", "jobTemplate", "spec", "template"),
    "apps/deployments": ("spec", "template"),
    "apps/replicasets": ("spec", "template"),
    "apps/statefulsets": ("spec", "template"),
    "apps/daemonsets": ("spec", "template"),
}
# Views the platform writes into a tenant; tenants read them.
READ_ONLY_VIEWS = {"nodes", QUEUE_GR, PRIORITYCLASS_GR}
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}


def policy_of(api: ServerApi, cluster: str) -> TenantPolicy | None:
    """The policy of the tenant served as logical cluster ``cluster`` (None: not a tenant)."""
    if cluster == names.HOST_CLUSTER:
        return None
    vc = api.store.get(names.HOST_CLUSTER, names.VC_GR, "", cluster)
    return TenantPolicy.from_object(vc) if vc is not None else None


def _forbidden(kind: str, name: str, message: str) -> ApiError:
    return ApiError(403, f'{kind} "{name}" is forbidden: {message}', "Forbidden",
                    {"name": name, "kind": kind})


class TenantAdmission:
    """``ServerPlugin.admission`` entry."""

    def __init__(self) -> None:
        self.creates = CreateRateLimiter()

    def __call__(self, api: ServerApi, cluster: str, info: Resource, obj: dict[str, Any],
                 old: dict[str, Any] | None) -> None:
        gr = info.group_resource
        if cluster == names.HOST_CLUSTER:
            if gr == names.VC_GR:
                causes = validate_virtual_cluster(obj)
                if causes:
                    raise invalid(names.GROUP, names.KIND, Meta.of(obj).name, causes)
            return
        if gr not in ("pods", PODGROUP_GR) and gr not in WORKLOAD_TEMPLATES:
            return
        policy = policy_of(api, cluster)
        if policy is None:
            return
        name = Meta.of(obj).name
        resource = info.resource
        if gr == "pods":
            self._pod(api, cluster, policy, obj, old, name)
        elif gr == PODGROUP_GR:
            spec = _dict(obj.get("spec"))
            queue = spec.get("queue")
            if queue:
                self._queue(policy, resource, name, queue, "spec.queue")
            else:
                spec["queue"] = policy.default_queue
                obj["spec"] = spec
            if spec.get("priorityClassName"):
                self._priority(api, policy, resource, name, spec["priorityClassName"],
                               "spec.priorityClassName")
        else:
            labels = Meta.of(obj).labels
            if labels.get(QUEUE_LABEL):
                self._queue(policy, resource, name, labels[QUEUE_LABEL],
                            f"metadata.labels[{QUEUE_LABEL}]")
            template = _dig(obj, WORKLOAD_TEMPLATES[gr])
            if isinstance(template, dict):
                self._pod_template(api, policy, resource, name, template,
                                   ".".join(WORKLOAD_TEMPLATES[gr]))

    # -- pods ----------------------------------------------------------------------------

    def _pod(self, api: ServerApi, cluster: str, policy: TenantPolicy, pod: dict[str, Any],
             old: dict[str, Any] | None, name: str) -> None:
        meta = metadata(pod)  # a stored object's: written to below
        labels = meta.get("labels")
        if old is None:
            if not isinstance(labels, dict):
                labels = {}
                meta["labels"] = labels
            labels.setdefault(QUEUE_LABEL, policy.default_queue)
        old_labels = Meta.of(old).labels
        if isinstance(labels, dict) and labels.get(QUEUE_LABEL) != old_labels.get(QUEUE_LABEL):
            self._queue(policy, "pods", name, str(labels.get(QUEUE_LABEL) or ""),
                        f"metadata.labels[{QUEUE_LABEL}]")
        if old is not None:
            return
        spec = _dict(pod.get("spec"))
        if spec.get("nodeName"):
            raise _forbidden("pods", name, "spec.nodeName: pods of a virtual cluster are placed "
                             "by the host's scheduler; leave spec.nodeName empty")
        self._pod_template(api, policy, "pods", name, pod, "")
        if policy.max_pods is not None:
            # Terminating pods count: their processes run until the grace period ends.
            live = sum(1 for p in api.store.list(cluster, "pods")
                       if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))
            if live >= policy.max_pods:
                raise _forbidden("pods", name, f"virtual cluster {policy.name!r} allows at most "
                                 f"{policy.max_pods} live pods (maxPods) and has {live} "
                                 "(terminating pods count)")
        if policy.pod_create_rate is not None:
            wait = self.creates.take(policy.name, policy.pod_create_rate,
                                     policy.pod_create_burst)
            if wait > 0:
                raise ApiError(429, f'pods "{name}" is forbidden: virtual cluster '
                               f"{policy.name!r} creates at most {policy.pod_create_rate:g} "
                               f"pods per second (podCreateRate, burst "
                               f"{policy.pod_create_burst}); retry in {wait:.1f}s",
                               "TooManyRequests", {"name": name, "kind": "pods",
                                                   "retryAfterSeconds": math.ceil(wait)})

    def _pod_template(self, api: ServerApi, policy: TenantPolicy, resource: str, name: str,
                      template: dict[str, Any], path: str) -> None:
        prefix = f"{path}." if path else ""
        labels = Meta.of(template).labels
        if labels.get(QUEUE_LABEL):
            self._queue(policy, resource, name, str(labels[QUEUE_LABEL]),
                        f"{prefix}metadata.labels[{QUEUE_LABEL}]")
        if labels.get(PRIORITY_LABEL):
            self._priority(api, policy, resource, name, str(labels[PRIORITY_LABEL]),
                           f"{prefix}metadata.labels[{PRIORITY_LABEL}]")
        spec = _dict(template.get("spec"))
        if spec.get("priorityClassName"):
            self._priority(api, policy, resource, name, str(spec["priorityClassName"]),
                           f"{prefix}spec.priorityClassName")
        for key in ("hostNetwork", "hostPID", "hostIPC"):
            if spec.get(key):
                raise _forbidden(resource, name, f"{prefix}spec.{key}: pods of a virtual "
                                 "cluster cannot share the host's namespaces")
        for i, volume in enumerate(spec.get("volumes") or ()):
            if isinstance(volume, dict) and "hostPath" in volume:
                raise _forbidden(resource, name, f"{prefix}spec.volumes[{i}].hostPath: pods "
                                 "of a virtual cluster cannot mount host paths")
        for key in ("containers", "initContainers"):
            for i, c in enumerate(spec.get(key) or ()):
                sc = c.get("securityContext") if isinstance(c, dict) else None
                if isinstance(sc, dict) and sc.get("privileged"):
                    raise _forbidden(resource, name, f"{prefix}spec.{key}[{i}]."
                                     "securityContext: pods of a virtual cluster cannot be "
                                     "privileged")

    @staticmethod
    def _queue(policy: TenantPolicy, resource: str, name: str, queue: str, field: str) -> None:
        if queue not in policy.queues:
            allowed = ", ".join(policy.queues)
            raise _forbidden(resource, name, f"{field}: queue {queue!r} is not allowed in "
                             f"virtual cluster {policy.name!r}; allowed queue(s): {allowed}")

    @staticmethod
    def _priority(api: ServerApi, policy: TenantPolicy, resource: str, name: str, cls: str,
                  field: str) -> None:
        if policy.priority_classes is not None:
            if cls not in policy.priority_classes:
                allowed = ", ".join(policy.priority_classes)
                raise _forbidden(resource, name, f"{field}: priority class {cls!r} is not "
                                 f"allowed in virtual cluster {policy.name!r}; allowed "
                                 f"priority classes: {allowed}")
            return
        if api.store.get(names.HOST_CLUSTER, PRIORITYCLASS_GR, "", cls) is None:
            host = sorted(Meta.of(pc).name
                          for pc in api.store.list(names.HOST_CLUSTER, PRIORITYCLASS_GR))
            raise _forbidden(resource, name, f"{field}: priority class {cls!r} is not one of "
                             f"the platform's; allowed priority classes: {', '.join(host)}")


def request_policy(api: ServerApi) -> RequestPolicy:
    """``ServerPlugin.request_policies`` entry: the verbs a tenant cannot use in its own
    cluster."""

    def refuse(cluster: str, user: Caller, attrs: RequestAttributes) -> str | None:
        if cluster == names.HOST_CLUSTER or user.is_admin:
            return None
        if attrs.verb not in WRITE_VERBS:
            return None
        gr = f"{attrs.group}/{attrs.resource}" if attrs.group else attrs.resource
        if gr not in READ_ONLY_VIEWS and not (
            gr == "pods" and attrs.subresource in ("binding", "status")
        ):
            return None
        policy = policy_of(api, cluster)
        if policy is None:
            return None
        what = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
        if gr in READ_ONLY_VIEWS:
            return (f'{what} is forbidden: in virtual cluster "{policy.name}" {attrs.resource} '
                    "are a read-only view of the host kept by the platform")
        return (f'{what} is forbidden: in virtual cluster "{policy.name}" pods are bound and '
                "their status is written by the host")
    return refuse


def log_target(api: ServerApi) -> LogTarget:
    """``ServerPlugin.log_targets`` entry: where the logs of a tenant pod are."""

    def target(cluster: str, ns: str, name: str) -> tuple[str, str, str] | None:
        if cluster == names.HOST_CLUSTER:
            return None
        vc = api.store.get(names.HOST_CLUSTER, names.VC_GR, "", cluster)
        if vc is None:
            return None
        if Meta.of(vc).annotations.get(
                names.PLANE_ANNOTATION) == names.SEPARATE_PLANE:
            raise ApiError(400, f'logs, exec and port-forward of pod "{name}" are not '
                                "served here: the host is another cluster, whose kubelets "
                                "this API server does not reach (the platform admin reaches "
                                f"the host pod in {names.host_namespace(cluster)})",
                           "BadRequest")
        pod = api.store.get(cluster, "pods", ns, name)
        if pod is None:
            return None
        host_ns, host = names.host_namespace(cluster), names.host_name(name, ns)
        host_pod = api.store.get(names.HOST_CLUSTER, "pods", host_ns, host)
        ann = Meta.of(host_pod).annotations
        if host_pod is None or ann.get(names.TENANT_UID_ANNOTATION) != Meta.of(pod).uid:
            raise ApiError(400, f'container logs of pod "{name}" are not available yet: the pod '
                                "has not reached the host", "BadRequest")
        return names.HOST_CLUSTER, host_ns, host
    return target


def tenant_limits(api: ServerApi) -> LimitsOf:
    """``ServerPlugin.tenant_limits`` entry: the API quota its VirtualCluster sets for a
    tenant's cluster (read on every growing write, so kept per VirtualCluster version)."""
    cache: dict[str, tuple[str, TenantLimits]] = {}

    def limits(cluster: str) -> TenantLimits | None:
        if cluster == names.HOST_CLUSTER:
            return None
        vc = api.store.get(names.HOST_CLUSTER, names.VC_GR, "", cluster)
        if vc is None:
            cache.pop(cluster, None)
            return None
        rv = Meta.of(vc).resource_version
        cached = cache.get(cluster)
        if cached is not None and cached[0] == rv:
            return cached[1]
        policy = TenantPolicy.from_object(vc)
        found = TenantLimits(policy.name, policy.max_objects, policy.max_storage_bytes)
        cache[cluster] = (rv, found)
        return found
    return limits



def server_plugin(api: ServerApi) -> ServerPlugin:
    """What tenancy plugs into the API server (`ApiServer(plugins=[...])`)."""
    return ServerPlugin("tenancy", admission=[TenantAdmission()],
                        request_policies=[request_policy(api)], log_targets=[log_target(api)],
                        crds=[virtualcluster_crd()], tenant_limits=tenant_limits(api))


def _dig(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
