"""``metrics.k8s.io/v1beta1``: NodeMetrics and PodMetrics from the agents' measurements, so
that ``kubectl top node|pod`` works against the embedded control plane.

Like metrics-server, the figures are the latest measurement window of each node agent
(CPU as a rate over the window, memory as the working set), filtered by what the caller's
request selects on the Node or Pod objects themselves (namespace, name, label selector).
Inside a tenant, its pods' figures are those of the host pods they run as (found through
the App's ``log_targets``, which tenancy plugs in), under the tenant's names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from starlette.responses import Response

from gpushare.apiserver.auth.access import ROOT_CLUSTER
from gpushare.apiserver.errors import ApiError
from gpushare.apiserver.resources import ResourceInfo
from gpushare.apiserver.storage.selectors import Requirement, parse_label_selector
from gpushare.apiserver.storage.store import Store
from gpushare.apiserver.telemetry.pushes import ResourceUsage

METRICS_GROUP = "metrics.k8s.io"
METRICS_VERSION = "v1beta1"


def _labels_match(selector: tuple[Requirement, ...], obj: dict[str, Any]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(req.matches(labels) for req in selector)


#: Where a pod really runs: (cluster, namespace, name) of the pod the agents measure, or
#: None for the pod itself (``App.log_targets``: a tenant's pod runs as a host pod).
Target = Callable[[str, str, str], "tuple[str, str, str] | None"]


def _pod_items(store: Store, usage: ResourceUsage, cluster: str, namespace: str | None,
               targets: list[Target]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(pod, its PodMetrics) for the pods of `cluster` the agents measure: a pod runs as
    itself, or (inside a tenant) as the pod its target names, whose figures it shows
    under its own name; a pod not yet running anywhere has none."""
    measured = {(i["metadata"]["namespace"], i["metadata"]["name"]): i
                for i in usage.pod_metrics()}
    pods = (store.list(cluster, "pods", namespace) if namespace is not None
            else store.list(cluster, "pods"))
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        ns, name = str(meta.get("namespace")), str(meta.get("name"))
        where: tuple[str, str, str] | None = None
        for target in targets:
            try:
                where = target(cluster, ns, name)
            except ApiError:  # not running anywhere yet
                where = None
                break
            if where is not None:
                break
        if where is not None and where[0] == cluster:
            where = None  # a target names a pod elsewhere, never one of this cluster
        key = (where[1], where[2]) if where is not None else (ns, name)
        item = measured.get(key)
        if item is None or (where is None and cluster != ROOT_CLUSTER):
            continue  # a tenant's own pods run only as host pods
        item["metadata"]["namespace"], item["metadata"]["name"] = ns, name
        out.append((pod, item))
    return out


def resource_metrics_response(store: Store, usage: ResourceUsage, cluster: str,
                              info: ResourceInfo, namespace: str | None, name: str | None,
                              query: dict[str, str],
                              targets: list[Target] | None = None) -> Response:
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
        for pod, item in _pod_items(store, usage, cluster, namespace, targets or []):
            if not _labels_match(selector, pod):
                continue
            item["metadata"]["labels"] = dict((pod.get("metadata") or {}).get("labels") or {})
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
