"""``metrics.k8s.io/v1beta1``: NodeMetrics and PodMetrics from the agents' measurements, so
that ``kubectl top node|pod`` works against the embedded control plane.

Like metrics-server, the figures are the latest measurement window of each node agent
(CPU as a rate over the window, memory as the working set), filtered by what the caller's
request selects on the Node or Pod objects themselves (namespace, name, label selector).
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

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
            meta = item["metadata"]
            if namespace and meta["namespace"] != namespace:
                continue
            pod = store.get(cluster, "pods", meta["namespace"], meta["name"])
            if pod is None or not _labels_match(selector, pod):
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
