"""Tenant objects to host objects and host state back: pure functions, the syncer's rules.

What a tenant pod becomes on the host:

* name ``names.host_name(name, namespace)`` in namespace ``vc-<tenant>``; labels saying
  whose it is (tenant, namespace, name) and its uid in an annotation; no owner references
  (the host has none of the tenant's owners; cleanup goes by these labels);
* the queue label is the tenant's (admission already refused another), the priority class
  the one it asked for (admission checked it), ``schedulerName`` the host's scheduler, the
  PodGroup the one the syncer made from the tenant's workload (``pod-group-name``), and the
  host pod-grouper is told to leave it alone;
* the spec keeps what runs the workload (containers, init containers, restart policy,
  grace period, node selector, tolerations, volumes of configMaps/secrets/emptyDir) with
  referenced ConfigMaps and Secrets renamed to their host copies, and the tenant-side
  ``metadata.*`` field references resolved to the tenant's values; everything else
  (nodeName, service accounts and their tokens, host namespaces, host paths, security
  contexts that raise privileges, runtime classes) is left behind.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from gpushare.api.contracts import (
    GPU_INDICES_ANNOTATION,
    GPU_MEMORY_MIB_ANNOTATION,
    GPU_PORTION_ANNOTATION,
    PODGROUP_ANNOTATION,
    PRIORITY_LABEL,
)
from gpushare.api.objects import Meta, Obj, metadata
from gpushare.controllers.scheduling.grouping import (
    PODGROUP_API_VERSION,
    PREEMPTIBILITY_LABEL,
    QUEUE_LABEL,
    SKIP_LABEL,
    PodGroupPlan,
)
from gpushare.tenancy import names

HOST_SCHEDULER = "gpushare"
SUBGROUP_LABEL = "kai.scheduler/subgroup-name"
# Annotations the host's scheduler writes at binding time: never the tenant's to set.
_HOST_OWNED_ANNOTATIONS = (GPU_INDICES_ANNOTATION, GPU_PORTION_ANNOTATION,
                           GPU_MEMORY_MIB_ANNOTATION, PODGROUP_ANNOTATION)
_KEPT_POD_SPEC = ("containers", "initContainers", "restartPolicy",
                  "terminationGracePeriodSeconds", "activeDeadlineSeconds", "nodeSelector",
                  "tolerations", "priorityClassName", "dnsPolicy", "hostname", "subdomain")
_KEPT_CONTAINER = ("name", "image", "command", "args", "workingDir", "env", "envFrom",
                   "resources", "ports", "imagePullPolicy", "terminationMessagePath",
                   "terminationMessagePolicy", "volumeMounts", "stdin", "tty")
_TENANT_FIELDS = ("metadata.name", "metadata.namespace", "metadata.uid")


def owned_by_tenant(tenant: str, namespace: str, name: str) -> dict[str, str]:
    """Labels of a host object made for tenant object ``namespace/name`` (label values are
    at most 63 characters: the full name is in the ``object`` annotation)."""
    return {names.TENANT_LABEL: tenant, names.TENANT_NAMESPACE_LABEL: namespace,
            names.TENANT_NAME_LABEL: _label_value(name)}


def _tenant_labels(labels: Any) -> dict[str, str]:
    if not isinstance(labels, dict):
        return {}
    return {k: str(v) for k, v in labels.items()
            if not k.startswith(names.RESERVED_PREFIXES) and k != SKIP_LABEL}


def _tenant_annotations(annotations: Any) -> dict[str, str]:
    if not isinstance(annotations, dict):
        return {}
    return {k: str(v) for k, v in annotations.items()
            if not k.startswith(names.RESERVED_PREFIXES) and k not in _HOST_OWNED_ANNOTATIONS
            and k != "kubectl.kubernetes.io/last-applied-configuration"}


# -- references ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class References:
    config_maps: frozenset[str]
    secrets: frozenset[str]


def references(pod: Obj) -> References:
    """The ConfigMaps and Secrets (tenant names) a pod needs to run."""
    cms: set[str] = set()
    secrets: set[str] = set()
    spec = _dict(pod.get("spec"))
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or ():
            if not isinstance(c, dict):
                continue
            for var in c.get("env") or ():
                vf = var.get("valueFrom") if isinstance(var, dict) else None
                if isinstance(vf, dict):
                    if isinstance(vf.get("configMapKeyRef"), dict):
                        cms.add(str(vf["configMapKeyRef"].get("name", "")))
                    if isinstance(vf.get("secretKeyRef"), dict):
                        secrets.add(str(vf["secretKeyRef"].get("name", "")))
            for src in c.get("envFrom") or ():
                if not isinstance(src, dict):
                    continue
                if isinstance(src.get("configMapRef"), dict):
                    cms.add(str(src["configMapRef"].get("name", "")))
                if isinstance(src.get("secretRef"), dict):
                    secrets.add(str(src["secretRef"].get("name", "")))
    for vol in spec.get("volumes") or ():
        if not isinstance(vol, dict):
            continue
        if isinstance(vol.get("configMap"), dict):
            cms.add(str(vol["configMap"].get("name", "")))
        if isinstance(vol.get("secret"), dict):
            secrets.add(str(vol["secret"].get("secretName", "")))
    return References(frozenset(c for c in cms if c), frozenset(s for s in secrets if s))


def _rename_refs(container: Obj, ns: str, tenant_pod: Obj) -> Obj:
    out = {k: copy.deepcopy(container[k]) for k in _KEPT_CONTAINER if k in container}
    env = []
    for var in out.get("env") or ():
        if not isinstance(var, dict):
            continue
        vf = var.get("valueFrom")
        if isinstance(vf, dict):
            if isinstance(vf.get("configMapKeyRef"), dict):
                ref = vf["configMapKeyRef"]
                ref["name"] = names.host_name(str(ref.get("name", "")), ns, 253)
            if isinstance(vf.get("secretKeyRef"), dict):
                ref = vf["secretKeyRef"]
                ref["name"] = names.host_name(str(ref.get("name", "")), ns, 253)
            field_ref = vf.get("fieldRef") if isinstance(vf.get("fieldRef"), dict) else None
            if field_ref is not None and field_ref.get("fieldPath") in _TENANT_FIELDS:
                key = str(field_ref["fieldPath"]).split(".", 1)[1]
                var = {"name": var.get("name"), "value": str(metadata(tenant_pod).get(key, ""))}
        env.append(var)
    if "env" in out:
        out["env"] = env
    for src in out.get("envFrom") or ():
        for key in ("configMapRef", "secretRef"):
            if isinstance(src, dict) and isinstance(src.get(key), dict):
                src[key]["name"] = names.host_name(str(src[key].get("name", "")), ns, 253)
    return out


def _volumes(spec: Obj, ns: str) -> list[Obj]:
    out = []
    for vol in spec.get("volumes") or ():
        if not isinstance(vol, dict) or not vol.get("name"):
            continue
        if isinstance(vol.get("configMap"), dict):
            cm = dict(vol["configMap"])
            cm["name"] = names.host_name(str(cm.get("name", "")), ns, 253)
            out.append({"name": vol["name"], "configMap": cm})
        elif isinstance(vol.get("secret"), dict):
            sec = dict(vol["secret"])
            sec["secretName"] = names.host_name(str(sec.get("secretName", "")), ns, 253)
            out.append({"name": vol["name"], "secret": sec})
        elif "emptyDir" in vol:
            out.append({"name": vol["name"], "emptyDir": vol.get("emptyDir") or {}})
    return out


def _drop_dangling_mounts(host_spec: Obj, volumes: set[str]) -> None:
    """Mounts of volumes the host pod does not get (the ServiceAccount token's volume that
    the tenant's API server adds, hostPath, ...) go with them: kube-apiserver refuses a pod
    whose mount names no volume of it."""
    for key in ("containers", "initContainers"):
        for container in host_spec.get(key) or ():
            mounts = container.get("volumeMounts")
            if not isinstance(mounts, list):
                continue
            kept = [m for m in mounts if isinstance(m, dict) and m.get("name") in volumes]
            if kept:
                container["volumeMounts"] = kept
            else:
                container.pop("volumeMounts")


# -- pods ---------------------------------------------------------------------------------


def host_pod(tenant: str, pod: Obj, queue: str, podgroup: str) -> Obj:
    """The host pod for tenant pod ``pod``."""
    meta = Meta.of(pod)
    ns, name = meta.namespace or "default", meta.name
    spec = _dict(pod.get("spec"))
    labels = _tenant_labels(meta.labels)
    labels.pop(PRIORITY_LABEL, None)
    labels[QUEUE_LABEL] = queue
    labels[SKIP_LABEL] = "true"
    labels.update(owned_by_tenant(tenant, ns, name))
    annotations = _tenant_annotations(meta.annotations)
    annotations[names.TENANT_UID_ANNOTATION] = meta.uid
    annotations[names.TENANT_OBJECT_ANNOTATION] = f"{ns}/{name}"
    annotations[PODGROUP_ANNOTATION] = podgroup
    controller = next((r for r in meta.owner_references if r.get("controller")), None)
    if controller is not None:
        annotations[names.TENANT_OWNER_ANNOTATION] = (
            f"{controller.get('kind', '')}/{controller.get('name', '')}/"
            f"{controller.get('uid', '')}")
    host_spec: Obj = {k: copy.deepcopy(spec[k]) for k in _KEPT_POD_SPEC if k in spec}
    host_spec["containers"] = [_rename_refs(c, ns, pod) for c in spec.get("containers") or ()
                               if isinstance(c, dict)]
    if spec.get("initContainers"):
        host_spec["initContainers"] = [_rename_refs(c, ns, pod) for c in spec["initContainers"]
                                       if isinstance(c, dict)]
    volumes = _volumes(spec, ns)
    if volumes:
        host_spec["volumes"] = volumes
    _drop_dangling_mounts(host_spec, {str(v["name"]) for v in volumes})
    host_spec["schedulerName"] = HOST_SCHEDULER
    host_spec["automountServiceAccountToken"] = False
    host_spec["enableServiceLinks"] = False
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": names.host_name(name, ns), "namespace": names.host_namespace(tenant),
                     "labels": labels, "annotations": annotations},
        "spec": host_spec,
    }


def tenant_status(host: Obj) -> Obj:
    """The status a tenant pod shows for its host pod."""
    return copy.deepcopy(_dict(host.get("status")))


def binding_for(tenant_pod: Obj, host: Obj) -> Obj:
    """The Binding that gives a tenant pod its host pod's node (and GPU slots)."""
    ann = Meta.of(host).annotations
    carried = {k: v for k, v in ann.items() if k.startswith("gpushare.io/")}
    return {"apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": Meta.of(tenant_pod).name, "annotations": carried},
            "target": {"apiVersion": "v1", "kind": "Node",
                       "name": (host.get("spec") or {}).get("nodeName", "")}}


# -- ConfigMaps and Secrets ----------------------------------------------------------------


def host_copy(tenant: str, obj: Obj) -> Obj:
    """The host copy of a tenant ConfigMap or Secret."""
    meta = Meta.of(obj)
    ns, name = meta.namespace or "default", meta.name
    out: Obj = {
        "apiVersion": "v1", "kind": obj.get("kind", "ConfigMap"),
        "metadata": {"name": names.host_name(name, ns, 253),
                     "namespace": names.host_namespace(tenant),
                     "labels": owned_by_tenant(tenant, ns, name),
                     "annotations": {names.TENANT_UID_ANNOTATION: meta.uid,
                                     names.TENANT_OBJECT_ANNOTATION: f"{ns}/{name}"}},
    }
    for key in ("data", "binaryData", "stringData", "type"):
        if key in obj:
            out[key] = copy.deepcopy(obj[key])
    return out


def copy_differs(host: Obj, want: Obj) -> bool:
    return any(host.get(k) != want.get(k) for k in ("data", "binaryData", "type")) or (
        Meta.of(host).annotations.get(names.TENANT_UID_ANNOTATION)
        != Meta.of(want).annotations[names.TENANT_UID_ANNOTATION])


# -- PodGroups ----------------------------------------------------------------------------


def host_podgroup(tenant: str, plan: PodGroupPlan, queue: str, tenant_pg: Obj | None) -> Obj:
    """The host PodGroup of a tenant workload: its gang size, subgroups and priority from
    the tenant (its explicit PodGroup, else its owner chain), its queue the platform's."""
    spec: Obj = plan.spec()
    spec["queue"] = queue
    if tenant_pg is not None:
        tspec = _dict(tenant_pg.get("spec"))
        for key in ("minMember", "minSubGroup", "subGroups", "priorityClassName",
                    "preemptibility", "topologyConstraint", "markUnschedulable"):
            if key in tspec:
                spec[key] = copy.deepcopy(tspec[key])
        spec["queue"] = queue
    owner = plan.owner
    return {
        "apiVersion": PODGROUP_API_VERSION,
        "kind": "PodGroup",
        "metadata": {
            "name": names.host_name(plan.name, plan.namespace),
            "namespace": names.host_namespace(tenant),
            "labels": {**owned_by_tenant(tenant, plan.namespace, str(owner.get("name", ""))),
                       QUEUE_LABEL: queue},
            "annotations": {names.TENANT_OWNER_ANNOTATION:
                            f"{owner.get('kind', '')}/{owner.get('name', '')}/"
                            f"{owner.get('uid', '')}"},
        },
        "spec": spec,
    }


def podgroup_differs(host: Obj, want: Obj) -> bool:
    return (host.get("spec") or {}) != want["spec"]


def _label_value(text: str) -> str:
    return text[:63].rstrip("-._")


__all__ = ["PREEMPTIBILITY_LABEL", "References", "binding_for", "copy_differs", "host_copy",
           "host_pod", "host_podgroup", "owned_by_tenant", "podgroup_differs", "references",
           "tenant_status"]


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
