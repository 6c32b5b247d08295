"""Endpoints and EndpointSlices of Services with a selector, as kube-controller-manager's
endpoints and endpointslice controllers keep them.

For each Service with a non-empty ``spec.selector`` the controller writes the Endpoints
of the same name (one subset: the matching pods that have an IP, ready ones under
``addresses``, the others under ``notReadyAddresses``; no subset when none) and one
EndpointSlice ``<service>-<hash>`` (label ``kubernetes.io/service-name``, managed by
``endpointslice-controller.k8s.io``, owned by the Service). Ports are the Service's, a
named ``targetPort`` resolved through the pod's container ports. When the Service goes,
its Endpoints are deleted (the slice goes with its owner). Services without a selector
keep whatever Endpoints their users write. Nothing here routes traffic.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from typing import Any

from gpushare.api.objects import Meta, Obj, metadata
from gpushare.kube.client import (
    ENDPOINTS,
    ENDPOINTSLICES,
    PODS,
    SERVICES,
    ApiError,
    KubeClient,
    Stopper,
)
from gpushare.kube.informer import WorkQueue, start_workers
from gpushare.kube.informers import InformerFactory

log = logging.getLogger(__name__)

WORKERS = 2
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
MANAGED_BY = "endpointslice-controller.k8s.io"


def _ready(pod: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def selected_pods(service: Obj, pods: list[Obj]) -> list[Obj]:
    """The Service's pods: in its namespace, matching its selector, with an IP, not
    finished or being deleted; by name."""
    selector = (service.get("spec") or {}).get("selector") or {}
    ns = Meta.of(service).namespace
    out = []
    for pod in pods:
        labels = Meta.of(pod).labels
        status = pod.get("status") or {}
        if (Meta.of(pod).namespace == ns and selector
                and all(labels.get(k) == v for k, v in selector.items())
                and status.get("podIP") and not Meta.of(pod).deleting
                and status.get("phase") not in ("Succeeded", "Failed")):
            out.append(pod)
    return sorted(out, key=lambda p: Meta.of(p).name)


def _target_port(port: Obj, pod: Obj | None) -> int | None:
    target = port.get("targetPort", port.get("port"))
    if isinstance(target, int):
        return target
    if isinstance(target, str) and target.isdigit():
        return int(target)
    for container in ((pod or {}).get("spec") or {}).get("containers") or []:
        for declared in container.get("ports") or []:
            if declared.get("name") == target:
                return int(declared.get("containerPort") or 0) or None
    return None


def _ports(service: Obj, pod: Obj | None) -> list[Obj]:
    out = []
    for port in (service.get("spec") or {}).get("ports") or []:
        number = _target_port(port, pod)
        if number is None:
            continue
        entry: Obj = {"port": number, "protocol": port.get("protocol") or "TCP"}
        if port.get("name"):
            entry["name"] = port["name"]
        out.append(entry)
    return out


def _address(pod: Obj) -> Obj:
    meta = Meta.of(pod)
    return {"ip": (pod.get("status") or {}).get("podIP"),
            "nodeName": (pod.get("spec") or {}).get("nodeName"),
            "targetRef": {"kind": "Pod", "namespace": meta.namespace,
                          "name": meta.name, "uid": meta.uid}}


def desired_endpoints(service: Obj, pods: list[Obj]) -> Obj:
    chosen = selected_pods(service, pods)
    ready = [_address(p) for p in chosen if _ready(p)]
    not_ready = [_address(p) for p in chosen if not _ready(p)]
    subsets: list[Obj] = []
    if chosen:
        subset: Obj = {"ports": _ports(service, chosen[0])}
        if ready:
            subset["addresses"] = ready
        if not_ready:
            subset["notReadyAddresses"] = not_ready
        subsets.append(subset)
    return {"apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": Meta.of(service).name,
                         "namespace": Meta.of(service).namespace,
                         "labels": dict(Meta.of(service).labels)},
            "subsets": subsets}


def slice_name(service: Obj) -> str:
    uid = Meta.of(service).uid
    return f"{Meta.of(service).name}-{hashlib.sha256(uid.encode()).hexdigest()[:5]}"


def desired_slice(service: Obj, pods: list[Obj]) -> Obj:
    meta = Meta.of(service)
    chosen = selected_pods(service, pods)
    return {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {
            "name": slice_name(service), "namespace": meta.namespace,
            "labels": {SERVICE_NAME_LABEL: meta.name, MANAGED_BY_LABEL: MANAGED_BY},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Service",
                                 "name": meta.name, "uid": meta.uid,
                                 "controller": True, "blockOwnerDeletion": True}],
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [(p.get("status") or {}).get("podIP")],
                       "conditions": {"ready": _ready(p)},
                       "nodeName": (p.get("spec") or {}).get("nodeName"),
                       "targetRef": _address(p)["targetRef"]} for p in chosen],
        "ports": _ports(service, chosen[0] if chosen else None),
    }


class EndpointsController:
    name = "endpoints-controller"

    def __init__(self, client: KubeClient, informers: InformerFactory, stopper: Stopper) -> None:
        self.client = client
        self.stopper = stopper
        self.services = informers.get(SERVICES)
        self.pods = informers.get(PODS)
        self.queue = WorkQueue()
        self._gone: dict[str, bool] = {}
        self.services.add_handler(self._on_service)
        self.pods.add_handler(self._on_pod)

    def start(self) -> list[threading.Thread]:
        return start_workers(self.queue, self.reconcile, self.stopper, self.name, WORKERS)

    def _on_service(self, kind: str, service: Obj, old: Obj | None) -> None:
        meta = Meta.of(service)
        key = f"{meta.namespace}/{meta.name}"
        if kind == "DELETED" and (service.get("spec") or {}).get("selector"):
            self._gone[key] = True
        self.queue.add(key)

    def _on_pod(self, kind: str, pod: Obj, old: Obj | None) -> None:
        ns = Meta.of(pod).namespace
        labels = Meta.of(pod).labels
        before = Meta.of(old or {}).labels
        for service in self.services.items():
            selector = (service.get("spec") or {}).get("selector") or {}
            if Meta.of(service).namespace != ns or not selector:
                continue
            if any(all(ls.get(k) == v for k, v in selector.items()) for ls in (labels, before)):
                self.queue.add(f"{ns}/{Meta.of(service).name}")

    def reconcile(self, key: str) -> None:
        ns, name = key.split("/", 1)
        service = self.services.get(key)
        if service is None:
            if self._gone.pop(key, False):
                try:
                    self.client.delete(ENDPOINTS.item(name, ns))
                except ApiError as error:
                    if error.status != 404:
                        raise
            return
        if not (service.get("spec") or {}).get("selector"):
            return
        pods = self.pods.items()
        self._write(ENDPOINTS, ns, desired_endpoints(service, pods), ("subsets",))
        self._write(ENDPOINTSLICES, ns, desired_slice(service, pods),
                    ("endpoints", "ports", "addressType"))

    def _write(self, resource: Any, ns: str, body: Obj, fields: tuple[str, ...]) -> None:
        name = Meta.of(body).name
        current = self.client.get(resource.item(name, ns))
        if current is None:
            try:
                self.client.create(resource.collection(ns), body)
            except ApiError as error:
                if error.status != 409:
                    raise
            return
        if all(current.get(f) == body[f] for f in fields):
            return
        self.client.replace(resource.item(name, ns), {**body, "metadata": {
            **metadata(current), "labels": Meta.of(body).labels}})
