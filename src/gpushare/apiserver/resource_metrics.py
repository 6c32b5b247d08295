"""``metrics.k8s.io/v1beta1``: NodeMetrics and PodMetrics from the agents' measurements, so
that ``kubectl top node|pod`` works against the embedded control plane.

Like metrics-server, the figures are the latest measurement window of each node agent
(CPU as a rate over the window, memory as the working set), filtered by what the caller's
request selects on the Node or Pod objects themselves (namespace, name, label selector).
Inside a tenant, its pods' figures are those of the host pods they were synced to, under
the tenant's names.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

from gpushare.apiserver.errors import ApiError
from gpushare.apiserver.resources import ResourceInfo
from gpushare.apiserver.selectors import Requirement, parse_label_selector
from gpushare.apiserver.store import Store
from gpushare.apiserver.telemetry import ResourceUsage
from gpushare.tenancy import names

METRICS_GROUP = "metrics.k8s.io"
METRICS_VERSION = "v1beta1"


def _labels_match(selector: tuple[Requirement, ...], obj: dict[str, Any]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(req.matches(labels) for req in selector)


def _pod_of(store: Store, cluster: str, item: dict[str, Any]) -> dict[str, Any] | None:
    """The pod of `cluster` a measured (host) pod is: itself in the host cluster; in a
    tenant's, the tenant pod it was synced from (the item renamed to it), and nothing for
    another tenant's or the host's own pods."""
    meta = item["metadata"]
    if cluster == names.HOST_CLUSTER:
        return store.get(cluster, "pods", meta["namespace"], meta["name"])
    host = store.get(names.HOST_CLUSTER, "pods", meta["namespace"], meta["name"])
    host_meta = (host or {}).get("metadata") or {}
    labels = host_meta.get("labels") or {}
    if labels.get(names.TENANT_LABEL) != cluster:
        return None
    ns, name = labels.get(names.TENANT_NAMESPACE_LABEL), labels.get(names.TENANT_NAME_LABEL)
    pod = store.get(cluster, "pods", str(ns), str(name)) if ns and name else None
    uid = (host_meta.get("annotations") or {}).get(names.TENANT_UID_ANNOTATION)
    if pod is None or (uid and uid != (pod.get("metadata") or {}).get("uid")):
        return None
    meta["namespace"], meta["name"] = ns, name
    return pod


def resource_metrics_response(store: Store, usage: ResourceUsage, cluster: str,
                              info: ResourceInfo, namespace: str | None, name: str | None,
                              query: dict[str, str]) -> Response:
    selector = parse_label_selector(query.get("labelSelector"))
    items: list[dict[str, Any]] = []
    if info.resource == "nodes":
        for item in usage.node_metrics():
            node = store.get(cluster, "nodes", "", item["metadata"]["name"])
            if node is None or not _labels_match(selector, node):
                continue
            item["metadata"]["labels"] = dict((node.get("metadata") or {}).get("labels") or {})
            items.append(item)
    else:
        for item in usage.pod_metrics():
            pod = _pod_of(store, cluster, item)
            meta = item["metadata"]
            if pod is None or (namespace and meta["namespace"] != namespace) or \
                    not _labels_match(selector, pod):
                continue
            meta["labels"] = dict((pod.get("metadata") or {}).get("labels") or {})
            items.append(item)
    if name is not None:
        for item in items:
            if item["metadata"]["name"] == name:
                return Response(orjson.dumps(item), 200, media_type="application/json")
        raise ApiError(404, f'{info.resource}.{METRICS_GROUP} "{name}" not found', "NotFound",
                       details={"name": name, "group": METRICS_GROUP, "kind": info.resource})
    body = {"kind": info.list_kind, "apiVersion": f"{METRICS_GROUP}/{METRICS_VERSION}",
            "metadata": {}, "items": items}
    return Response(orjson.dumps(body), 200, media_type="application/json")
