"""Pod garbage collection: pods bound to a node that no longer exists are deleted.

kube-controller-manager's pod GC does this on a real cluster (orphaned pods); without it,
deleting a node would leave its pods ``Terminating`` (or running, as far as the API
says) forever, since no agent is left to finish them. The node is read from the API
before a pod goes (a lagging cache never deletes a pod whose node just arrived), and the
deletion is immediate (grace period 0, the pod's uid as precondition).
"""

from __future__ import annotations

import logging
import threading

from gpushare.api.objects import Meta, Obj
from gpushare.kube.client import NODES, PODS, ApiError, KubeClient, Stopper
from gpushare.kube.informer import WorkQueue, start_workers
from gpushare.kube.informers import InformerFactory

log = logging.getLogger(__name__)

WORKERS = 2
SWEEP_SECONDS = 20.0  # also look for orphans this often (a missed node deletion)


class PodGC:
    name = "pod-gc"

    def __init__(self, client: KubeClient, informers: InformerFactory, stopper: Stopper) -> None:
        self.client = client
        self.stopper = stopper
        self.nodes = informers.get(NODES)
        self.pods = informers.get(PODS)
        self.queue = WorkQueue()
        self.collected = 0
        self.nodes.add_handler(self._on_node)

    def start(self) -> list[threading.Thread]:
        sweeper = threading.Thread(target=self._sweep_loop, name="pod-gc-sweep", daemon=True)
        sweeper.start()
        return [sweeper, *start_workers(self.queue, self.reconcile, self.stopper, self.name,
                                        WORKERS)]

    def _on_node(self, kind: str, node: Obj, old: Obj | None) -> None:
        if kind == "DELETED":
            name = Meta.of(node).name
            for pod in self.pods.items():
                if (pod.get("spec") or {}).get("nodeName") == name:
                    self._enqueue(pod)

    def _enqueue(self, pod: Obj) -> None:
        meta = Meta.of(pod)
        self.queue.add(f"{meta.namespace}/{meta.name}")

    def _sweep_loop(self) -> None:
        while not self.stopper.stopped:
            self.sweep()
            if self.stopper.wait(SWEEP_SECONDS):
                return

    def sweep(self) -> None:
        """Queue every pod whose node is not in the cache (checked against the API)."""
        if not (self.nodes.wait_synced(0) and self.pods.wait_synced(0)):
            return
        known = set(self.nodes.keys())
        for pod in self.pods.items():
            node = (pod.get("spec") or {}).get("nodeName")
            if node and node not in known:
                self._enqueue(pod)

    def reconcile(self, key: str) -> None:
        pod = self.pods.get(key)
        if pod is None:
            return
        meta = Meta.of(pod)
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or self.client.get(NODES.item(str(node))) is not None:
            return
        try:
            self.client.delete(PODS.item(meta.name, meta.namespace),
                               grace_period_seconds=0, uid=meta.uid or None)
        except ApiError as error:
            if error.conflict:
                return  # another pod of that name now
            raise
        self.collected += 1
        log.info("deleted pod %s: its node %s no longer exists", key, node)
