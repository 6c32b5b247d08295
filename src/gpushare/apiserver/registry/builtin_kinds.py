"""The built-in kinds: what they are called and how their objects get their defaults."""

from __future__ import annotations

import copy
from typing import Any

from gpushare.api.objects import complete_node_info
from gpushare.apiserver.resources import PrinterColumn, ResourceInfo

DEFAULT_SCHEDULER = "gpushare"

_CREATED_AT = (PrinterColumn("Created At", "date", ".metadata.creationTimestamp"),)


def builtin_resources() -> list[ResourceInfo]:
    r = ResourceInfo
    return [
        r("", "v1", "namespaces", "Namespace", False, short_names=("ns",),
          subresources=("status", "finalize")),
        r("", "v1", "nodes", "Node", False, short_names=("no",), subresources=("status",)),
        r("", "v1", "pods", "Pod", True, short_names=("po",), categories=("all",),
          subresources=("status", "binding", "log", "eviction", "exec", "attach", "portforward")),
        r("", "v1", "events", "Event", True, short_names=("ev",)),
        r("", "v1", "configmaps", "ConfigMap", True, short_names=("cm",)),
        r("", "v1", "secrets", "Secret", True),
        r("", "v1", "serviceaccounts", "ServiceAccount", True, short_names=("sa",),
          subresources=("token",)),
        r("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False,
          short_names=("pc",)),
        r("coordination.k8s.io", "v1", "leases", "Lease", True),
        r("batch", "v1", "jobs", "Job", True, categories=("all",), subresources=("status",)),
        r("apps", "v1", "deployments", "Deployment", True, short_names=("deploy",),
          categories=("all",), subresources=("status", "scale")),
        r("apps", "v1", "replicasets", "ReplicaSet", True, short_names=("rs",),
          categories=("all",), subresources=("status", "scale")),
        r("apps", "v1", "statefulsets", "StatefulSet", True, short_names=("sts",),
          categories=("all",), subresources=("status", "scale")),
        r("apps", "v1", "daemonsets", "DaemonSet", True, short_names=("ds",),
          categories=("all",), subresources=("status",)),
        r("batch", "v1", "cronjobs", "CronJob", True, short_names=("cj",), categories=("all",),
          subresources=("status",)),
        r("", "v1", "services", "Service", True, short_names=("svc",), categories=("all",),
          subresources=("status",)),
        r("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True,
          short_names=("pdb",), subresources=("status",)),
        r("rbac.authorization.k8s.io", "v1", "roles", "Role", True, columns=_CREATED_AT),
        r("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False,
          columns=_CREATED_AT),
        r("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True),
        r("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding",
          False),
        r("apiextensions.k8s.io", "v1", "customresourcedefinitions",
          "CustomResourceDefinition", False, short_names=("crd", "crds"),
          subresources=("status",), columns=_CREATED_AT),
        r("authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview",
          False, verbs=("create",)),
        r("authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview",
          False, verbs=("create",)),
        # Served from the node agents' measurements (apiserver/telemetry/resource_metrics.py).
        r("metrics.k8s.io", "v1beta1", "nodes", "NodeMetrics", False, verbs=("get", "list")),
        r("metrics.k8s.io", "v1beta1", "pods", "PodMetrics", True, verbs=("get", "list")),
        r("authorization.k8s.io", "v1", "selfsubjectrulesreviews", "SelfSubjectRulesReview",
          False, verbs=("create",)),
        r("authentication.k8s.io", "v1", "selfsubjectreviews", "SelfSubjectReview", False,
          verbs=("create",)),
        r("events.k8s.io", "v1", "events", "Event", True, short_names=("ev",),
          storage_group_resource="events"),
        # Stored and validated as Kubernetes does; nothing here routes traffic or runs them.
        r("", "v1", "resourcequotas", "ResourceQuota", True, short_names=("quota",),
          subresources=("status",)),
        r("", "v1", "limitranges", "LimitRange", True, short_names=("limits",)),
        r("", "v1", "replicationcontrollers", "ReplicationController", True,
          short_names=("rc",), categories=("all",), subresources=("status", "scale")),
        r("", "v1", "podtemplates", "PodTemplate", True),
        r("", "v1", "endpoints", "Endpoints", True, short_names=("ep",)),
        r("apps", "v1", "controllerrevisions", "ControllerRevision", True),
        r("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", True),
        # Called on creates and updates (apiserver/admission/mutating.py).
        r("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
          "MutatingWebhookConfiguration", False, columns=_CREATED_AT),
        r("networking.k8s.io", "v1", "ingresses", "Ingress", True, short_names=("ing",),
          subresources=("status",)),
        r("networking.k8s.io", "v1", "ingressclasses", "IngressClass", False),
        r("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", False),
        r("certificates.k8s.io", "v1", "certificatesigningrequests",
          "CertificateSigningRequest", False, short_names=("csr",),
          subresources=("status", "approval")),
        r("authentication.k8s.io", "v1", "tokenreviews", "TokenReview", False,
          verbs=("create",)),
    ]


def kubernetes_service() -> dict[str, Any]:
    """The `kubernetes` Service of the `default` namespace, naming the API itself."""
    return {"metadata": {"name": "kubernetes", "labels": {"component": "apiserver",
                                                          "provider": "kubernetes"}},
            "spec": {"type": "ClusterIP", "sessionAffinity": "None",
                     "ports": [{"name": "https", "port": 443, "protocol": "TCP",
                                "targetPort": 6443}]}}


def api_endpoints(ip: str, port: int) -> dict[tuple[str, str, str], dict[str, Any]]:
    """The `kubernetes` Service's Endpoints and EndpointSlice: the API at `ip`:`port`."""
    family = "IPv6" if ":" in ip else "IPv4"
    return {
        ("", "v1", "endpoints"): {
            "metadata": {"name": "kubernetes",
                         "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
            "subsets": [{"addresses": [{"ip": ip}],
                         "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}],
        },
        ("discovery.k8s.io", "v1", "endpointslices"): {
            "metadata": {"name": "kubernetes",
                         "labels": {"kubernetes.io/service-name": "kubernetes"}},
            "addressType": family,
            "endpoints": [{"addresses": [ip], "conditions": {"ready": True}}],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
        },
    }


MONITORING_ROLE = "system:monitoring"


def monitoring_cluster_role() -> dict[str, Any]:
    """Read access to the health and metrics endpoints (Kubernetes' role of that name):
    bind it to the token Prometheus scrapes /metrics with."""
    return {"metadata": {"name": MONITORING_ROLE,
                         "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
            "rules": [{"nonResourceURLs": ["/healthz", "/healthz/*", "/livez", "/livez/*",
                                           "/readyz", "/readyz/*", "/metrics"],
                       "verbs": ["get"]}]}


PRIORITY_CLASSES = {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}

SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


# -- defaults ----------------------------------------------------------------------------------


def _image_pull_policy(image: str) -> str:
    tail = image.rsplit("/", 1)[-1]
    if "@" in tail:
        return "IfNotPresent"
    if ":" not in tail or tail.endswith(":latest"):
        return "Always"
    return "IfNotPresent"


def default_container(c: dict[str, Any]) -> None:
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    c.setdefault("imagePullPolicy", _image_pull_policy(str(c.get("image") or "")))
    c.setdefault("resources", {})
    for port in c.get("ports") or ():
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
    res = c["resources"]
    # Like Kubernetes: limits without requests imply equal requests.
    if isinstance(res, dict) and isinstance(res.get("limits"), dict):
        requests = res.setdefault("requests", {})
        if isinstance(requests, dict):
            for k, v in res["limits"].items():
                requests.setdefault(k, v)


def default_pod_spec(spec: dict[str, Any]) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", DEFAULT_SCHEDULER)
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    if "serviceAccountName" not in spec and "serviceAccount" in spec:
        spec["serviceAccountName"] = spec["serviceAccount"]
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or ():
            if isinstance(c, dict):
                default_container(c)


def qos_class(spec: dict[str, Any]) -> str:
    containers = [c for c in spec.get("containers") or () if isinstance(c, dict)]
    any_set = False
    guaranteed = bool(containers)
    for c in containers:
        res = c.get("resources") or {}
        limits = res.get("limits") or {}
        requests = res.get("requests") or {}
        if limits or requests:
            any_set = True
        for name in ("cpu", "memory"):
            if name not in limits or requests.get(name, limits.get(name)) != limits.get(name):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def default_object(gr: str, obj: dict[str, Any]) -> None:
    """Fill in what Kubernetes would default on create."""
    spec = obj.get("spec")
    if gr == "pods":
        spec = obj.setdefault("spec", {})
        default_pod_spec(spec)
        status = obj.setdefault("status", {})
        status.setdefault("phase", "Pending")
        status.setdefault("qosClass", qos_class(spec))
    elif gr == "namespaces":
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj.setdefault("status", {}).setdefault("phase", "Active")
        labels = obj["metadata"].setdefault("labels", {})
        labels["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
    elif gr == "secrets":
        obj.setdefault("type", "Opaque")
    elif gr == "nodes":
        status = obj.get("status")
        if isinstance(status, dict) and "nodeInfo" in status:
            status["nodeInfo"] = complete_node_info(status["nodeInfo"])
    elif gr == "scheduling.k8s.io/priorityclasses":
        obj.setdefault("preemptionPolicy", "PreemptLowerPriority")
    elif gr == "batch/jobs" and isinstance(spec, dict):
        spec.setdefault("parallelism", 1)
        spec.setdefault("completions", 1)
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
        spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
        _default_template(spec)
        uid = obj["metadata"]["uid"]
        if not spec.get("manualSelector"):
            spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
            tmeta = spec.setdefault("template", {}).setdefault("metadata", {})
            labels = tmeta.setdefault("labels", {})
            labels["batch.kubernetes.io/controller-uid"] = uid
            labels["controller-uid"] = uid
            labels["batch.kubernetes.io/job-name"] = obj["metadata"]["name"]
            labels["job-name"] = obj["metadata"]["name"]
    elif gr == "batch/cronjobs" and isinstance(spec, dict):
        for key, value in (("concurrencyPolicy", "Allow"), ("suspend", False),
                           ("successfulJobsHistoryLimit", 3), ("failedJobsHistoryLimit", 1)):
            spec.setdefault(key, value)
        template = spec.get("jobTemplate")
        if isinstance(template, dict) and isinstance(template.get("spec"), dict):
            _default_template(template["spec"])
    elif gr == "apps/statefulsets" and isinstance(spec, dict):
        spec.setdefault("replicas", 1)
        spec.setdefault("podManagementPolicy", "OrderedReady")
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("updateStrategy", {"type": "RollingUpdate",
                                           "rollingUpdate": {"partition": 0}})
        _default_template(spec)
    elif gr == "apps/daemonsets" and isinstance(spec, dict):
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {
            "maxUnavailable": 1, "maxSurge": 0}})
        _default_template(spec)
    elif gr in ("apps/deployments", "apps/replicasets") and isinstance(spec, dict):
        spec.setdefault("replicas", 1)
        spec.setdefault("revisionHistoryLimit", 10)
        if gr == "apps/deployments":
            spec.setdefault("progressDeadlineSeconds", 600)
            spec.setdefault(
                "strategy",
                {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%",
                                                            "maxSurge": "25%"}},
            )
        _default_template(spec)


def _default_template(spec: dict[str, Any]) -> None:
    template = spec.get("template")
    if isinstance(template, dict) and isinstance(template.get("spec"), dict):
        tspec = template["spec"]
        default_pod_spec(tspec)


def complete_stored_nodes(store: Any, clusters: list[str]) -> int:
    """Give every stored Node whose ``status.nodeInfo`` lacks a required field the missing
    ones (written before writes were defaulted so), so that no reader meets a Node its
    typed client refuses; how many were rewritten."""
    fixed = 0
    for cluster in clusters:
        for node in list(store.list(cluster, "nodes")):
            status = node.get("status")
            info = status.get("nodeInfo") if isinstance(status, dict) else None
            if not isinstance(info, dict) or complete_node_info(info) == info:
                continue
            repaired = copy.deepcopy(node)
            repaired["status"]["nodeInfo"] = complete_node_info(info)
            store.put(cluster, "nodes", repaired)
            fixed += 1
    return fixed
