"""The garbage collector: dependents whose owners are all gone are deleted.

Like Kubernetes' background propagation: deleting a Job removes it at once, and its
pods (and its PodGroup) follow here. An owner missing from the cache is confirmed with
a GET before anything is deleted, since watches of different resources run apart.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from gpushare.controllers.informer import Informer, WorkQueue, start_workers
from gpushare.controllers.informers import InformerFactory
from gpushare.controllers.kube import BY_KIND, JOBS, PODGROUPS, PODS, KubeClient, Resource, Stopper

log = logging.getLogger(__name__)

WORKERS = 4  # concurrent reconciles: API round trips overlap

Obj = dict[str, Any]


def owner_present(ref: Obj, namespace: str, cached: Obj | None) -> bool:
    """Whether ``cached`` (the object of the reference's name, or None) is that owner."""
    return cached is not None and (cached.get("metadata") or {}).get("uid") == ref.get("uid")


class GarbageCollector:
    name = "garbage-collector"

    def __init__(self, client: KubeClient, informers: InformerFactory, stopper: Stopper) -> None:
        self.client = client
        self.stopper = stopper
        self.owners: dict[str, Informer] = {
            "Pod": informers.get(PODS),
            "Job": informers.get(JOBS),
        }
        self.dependents: dict[str, tuple[Resource, Informer]] = {
            "pods": (PODS, informers.get(PODS)),
            "podgroups": (PODGROUPS, informers.get(PODGROUPS)),
        }
        self.queue = WorkQueue()
        self.workers = WORKERS
        self._by_owner: dict[str, set[str]] = {}  # owner uid -> dependent work keys
        self._lock = threading.Lock()
        self.deleted = 0
        for plural, (_, informer) in self.dependents.items():
            informer.add_handler(self._dependent_handler(plural))
        for informer in self.owners.values():
            informer.add_handler(self._on_owner)

    def start(self) -> list[threading.Thread]:
        return start_workers(self.queue, self.reconcile, self.stopper, self.name, self.workers)

    def _dependent_handler(self, plural: str):
        def on_change(kind: str, obj: Obj, old: Obj | None) -> None:
            meta = obj.get("metadata") or {}
            refs = meta.get("ownerReferences") or []
            work_key = f"{plural}|{meta.get('namespace')}/{meta.get('name')}"
            with self._lock:
                for ref in refs:
                    uid = str(ref.get("uid", ""))
                    if kind == "DELETED":
                        deps = self._by_owner.get(uid)
                        if deps is not None:
                            deps.discard(work_key)
                            if not deps:
                                del self._by_owner[uid]
                    else:
                        self._by_owner.setdefault(uid, set()).add(work_key)
            if kind == "ADDED" and refs:
                self.queue.add(work_key)

        return on_change

    def _on_owner(self, kind: str, obj: Obj, old: Obj | None) -> None:
        if kind != "DELETED":
            return
        uid = str((obj.get("metadata") or {}).get("uid", ""))
        with self._lock:
            keys = list(self._by_owner.get(uid, ()))
        self.queue.add_all(keys)

    def _owner_exists(self, ref: Obj, namespace: str) -> bool:
        kind = str(ref.get("kind", ""))
        resource = BY_KIND.get(kind)
        if resource is None:
            return True  # a kind we cannot read: never collect on its account
        informer = self.owners.get(kind)
        ns = namespace if resource.namespaced else None
        if informer is not None:
            key = f"{ns}/{ref.get('name')}" if ns else str(ref.get("name"))
            if owner_present(ref, namespace, informer.get(key)):
                return True
        try:
            found = self.client.get(resource.item(str(ref.get("name")), ns))
        except Exception:
            return True  # cannot tell: keep it
        return owner_present(ref, namespace, found)

    def reconcile(self, work_key: str) -> None:
        plural, _, key = work_key.partition("|")
        resource, informer = self.dependents[plural]
        obj = informer.get(key)
        if obj is None:
            return
        meta = obj.get("metadata") or {}
        refs = meta.get("ownerReferences") or []
        if not refs or meta.get("deletionTimestamp"):
            return
        namespace = str(meta.get("namespace", ""))
        if any(self._owner_exists(ref, namespace) for ref in refs):
            return
        log.info("collecting %s %s: its owners are gone", plural, key)
        self.client.delete(
            resource.item(str(meta.get("name")), namespace or None),
            propagation="Background",
            uid=str(meta.get("uid", "")) or None,
        )
        self.deleted += 1
