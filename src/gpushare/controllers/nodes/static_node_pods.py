"""Pod deletions on static nodes.

A bound pod is deleted gracefully: the API server marks it and waits for the node's
agent to stop it and finish the deletion. A static node (``gpushare node add``) has no
agent and runs nothing, so this controller finishes those deletions at once.
"""

from __future__ import annotations

import logging
import threading

from gpushare.api.objects import Meta, Obj
from gpushare.controllers.nodes.static_nodes import STATIC_NODE_ANNOTATION
from gpushare.kube.client import NODES, PODS, KubeClient, Stopper
from gpushare.kube.informer import WorkQueue, start_workers
from gpushare.kube.informers import InformerFactory

log = logging.getLogger(__name__)

WORKERS = 4  # concurrent reconciles: API round trips overlap



def is_static(node: Obj | None) -> bool:
    return Meta.of(node).annotations.get(STATIC_NODE_ANNOTATION) == "true"


class StaticNodePods:
    name = "static-node-pods"

    def __init__(self, client: KubeClient, informers: InformerFactory, stopper: Stopper) -> None:
        self.client = client
        self.stopper = stopper
        self.nodes = informers.get(NODES)
        self.pods = informers.get(PODS)
        self.queue = WorkQueue()
        self.workers = WORKERS
        self.finished = 0
        self.pods.add_handler(self._on_pod)

    def start(self) -> list[threading.Thread]:
        return start_workers(self.queue, self.reconcile, self.stopper, self.name, self.workers)

    def _on_pod(self, kind: str, pod: Obj, old: Obj | None) -> None:
        meta = Meta.of(pod)
        if kind != "DELETED" and meta.deleting and (pod.get("spec") or {}).get("nodeName"):
            self.queue.add(f"{meta.namespace}/{meta.name}")

    def reconcile(self, key: str) -> None:
        pod = self.pods.get(key)
        if pod is None:
            return
        meta = Meta.of(pod)
        node = (pod.get("spec") or {}).get("nodeName")
        if not meta.deleting or not node:
            return
        if not is_static(self.nodes.get(str(node))):
            return
        self.client.delete(
            PODS.item(meta.name, meta.namespace), grace_period_seconds=0, uid=meta.uid or None,
        )
        self.finished += 1
