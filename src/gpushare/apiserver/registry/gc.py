"""The server's own garbage collector: owner references, namespaces, deletion finalizers.

It runs as a task on the server's event loop. Background cascading deletion is therefore
asynchronous (dependents disappear shortly after their owner, as in Kubernetes); foreground
deletion keeps the owner (with the `foregroundDeletion` finalizer) until its dependents are
gone; orphaning strips the owner reference from the dependents before the owner goes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from gpushare.api.timefmt import parse_time
from gpushare.apiserver.errors import ApiError
from gpushare.apiserver.objects import deep_copy
from gpushare.apiserver.registry.api import FOREGROUND, ORPHAN, Api, DeleteOptions
from gpushare.apiserver.resources import ResourceInfo
from gpushare.apiserver.storage.store import StoreUnavailable

log = logging.getLogger(__name__)


class GarbageCollector:
    def __init__(self, api: Api, interval: float = 1.0, event_ttl: float = 3600.0) -> None:
        self.api = api
        self.interval = interval
        # Events expire like in Kubernetes (1 h by default), so that they cannot pile up.
        self.event_ttl = event_ttl
        self._next_event_sweep = 0.0
        self._wake: asyncio.Event | None = None
        self.passes = 0

    def wake(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def run(self) -> None:
        self._wake = asyncio.Event()
        self.api.wake_gc = self.wake
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval)
            self._wake.clear()
            try:
                self.run_once()
            except Exception:  # keep collecting; one bad object must not stop the collector
                log.exception("garbage collection pass failed")

    def run_once(self) -> None:
        self.passes += 1
        api = self.api
        # Each piece of work is guarded alone: an object the collector cannot handle (one
        # stored before validation, say) is logged by name and skipped, never holding up
        # the work after it.
        while api.gone_owners:
            cluster, uid = api.gone_owners.pop(0)
            self._guard(f"dependents of uid {uid} in cluster {cluster}",
                        self._collect_dependents, cluster, uid)
        for key in sorted(api.finalizing):
            if not self._guard(f"finalizing {'/'.join(key)}", self._finalize, *key):
                api.finalizing.discard(key)
        for cluster, ns in sorted(api.terminating_namespaces):
            self._guard(f"namespace {ns} in cluster {cluster}", self._drain_namespace,
                        cluster, ns)
        now = time.time()
        if now >= self._next_event_sweep:
            self._next_event_sweep = now + min(60.0, self.event_ttl)
            self._guard("event expiry", self._expire_events, now)

    @staticmethod
    def _guard(what: str, work: Any, *args: Any) -> bool:
        try:
            work(*args)
        except StoreUnavailable:
            raise
        except Exception:
            log.exception("garbage collection: skipping %s", what)
            return False
        return True

    def _expire_events(self, now: float) -> None:
        cutoff = now - self.event_ttl
        for cluster in list(self.api.registries):
            for event in list(self.api.store.list(cluster, "events")):
                stamp = (event.get("lastTimestamp") or event.get("eventTime")
                         or event["metadata"].get("creationTimestamp"))
                t = parse_time(stamp)
                if t is not None and t.timestamp() < cutoff:
                    self.api.store.delete(cluster, "events",
                                          event["metadata"].get("namespace") or "",
                                          event["metadata"]["name"])

    def _info(self, cluster: str, gr: str) -> ResourceInfo | None:
        return self.api.registry(cluster).group_resources().get(gr)

    def _collect_dependents(self, cluster: str, uid: str) -> None:
        for gr, ns, name in self.api.store.dependents(cluster, uid):
            info = self._info(cluster, gr)
            dep = self.api.store.get(cluster, gr, ns, name)
            if info is None or dep is None:
                continue
            refs = dep["metadata"].get("ownerReferences") or []
            if any(r.get("uid") == uid and self.api.owner_exists(cluster, ns, r) for r in refs):
                continue  # the owner is there after all
            alive = [r for r in refs if r.get("uid") != uid
                     and self.api.owner_exists(cluster, ns, r)]
            try:
                if alive:
                    obj = deep_copy(dep)
                    obj["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != uid]
                    self.api.update(cluster, info, ns, name, obj)
                elif not dep["metadata"].get("deletionTimestamp"):
                    self.api.delete(cluster, info, ns, name, DeleteOptions(
                        propagation="Background"))
            except ApiError as e:
                log.debug("gc of %s/%s/%s: %s", gr, ns, name, e.message)

    def _finalize(self, cluster: str, gr: str, ns: str, name: str) -> None:
        api = self.api
        obj = api.store.get(cluster, gr, ns, name)
        info = self._info(cluster, gr)
        if obj is None or info is None:
            api.finalizing.discard((cluster, gr, ns, name))
            return
        m = obj["metadata"]
        finalizers = list(m.get("finalizers") or ())
        if not m.get("deletionTimestamp"):  # e.g. its deletion was undone
            api.finalizing.discard((cluster, gr, ns, name))
            return
        uid = m.get("uid", "")
        deps = api.store.dependents(cluster, uid)
        if ORPHAN in finalizers:
            for dgr, dns, dname in deps:
                dinfo = self._info(cluster, dgr)
                dep = api.store.get(cluster, dgr, dns, dname)
                if dinfo is None or dep is None:
                    continue
                copy = deep_copy(dep)
                copy["metadata"]["ownerReferences"] = [
                    r for r in copy["metadata"].get("ownerReferences") or ()
                    if r.get("uid") != uid]
                if not copy["metadata"]["ownerReferences"]:
                    del copy["metadata"]["ownerReferences"]
                api.update(cluster, dinfo, dns, dname, copy)
            finalizers.remove(ORPHAN)
        elif FOREGROUND in finalizers:
            blocking = False
            for dgr, dns, dname in deps:
                dinfo = self._info(cluster, dgr)
                dep = api.store.get(cluster, dgr, dns, dname)
                if dinfo is None or dep is None:
                    continue
                blocking = blocking or _blocks(dep, uid)
                if dep["metadata"].get("deletionTimestamp"):
                    continue
                try:
                    self._delete_dependent(cluster, dinfo, dns, dep, uid)
                except ApiError as e:
                    log.debug("foreground delete of %s: %s", dname, e.message)
            if blocking:
                return  # only dependents with blockOwnerDeletion hold the owner
            finalizers.remove(FOREGROUND)
        else:
            api.finalizing.discard((cluster, gr, ns, name))
            return
        copy = deep_copy(obj)
        copy["metadata"]["finalizers"] = finalizers
        if not finalizers:
            del copy["metadata"]["finalizers"]
            api.finalizing.discard((cluster, gr, ns, name))
        api.update(cluster, info, ns, name, copy)

    def _delete_dependent(self, cluster: str, dinfo: ResourceInfo, ns: str,
                          dep: dict[str, Any], uid: str) -> None:
        """A dependent of an owner deleted in the foreground: kept (without the reference)
        when another owner stays, else deleted in the foreground too. A dependent whose
        own dependents already wait in the foreground (an ownership cycle) first stops
        blocking its owners, so the cycle cannot hold every member forever, as in
        Kubernetes' collector."""
        api, name = self.api, dep["metadata"]["name"]
        if self._has_solid_owner(cluster, ns, dep, uid):
            kept = deep_copy(dep)
            kept["metadata"]["ownerReferences"] = [
                r for r in kept["metadata"].get("ownerReferences") or ()
                if r.get("uid") != uid]
            api.update(cluster, dinfo, ns, name, kept)
            return
        dep_uid = dep["metadata"].get("uid", "")
        if any(_waiting(api.store.get(cluster, g, n, d))
               for g, n, d in api.store.dependents(cluster, dep_uid)):
            unblocked = deep_copy(dep)
            unblocked["metadata"]["ownerReferences"] = [
                {**r, "blockOwnerDeletion": False}
                for r in unblocked["metadata"].get("ownerReferences") or ()]
            dep = api.update(cluster, dinfo, ns, name, unblocked)
        api.delete(cluster, dinfo, ns, name, DeleteOptions(propagation="Foreground"))

    def _has_solid_owner(self, cluster: str, ns: str, dep: dict[str, Any], uid: str) -> bool:
        """Whether the dependent has an owner other than `uid` that exists and is not
        itself waiting for its dependents (foreground deletion), as Kubernetes' collector
        decides whether a dependent of a foreground deletion is deleted or kept."""
        for ref in dep["metadata"].get("ownerReferences") or ():
            if ref.get("uid") == uid or not self.api.owner_exists(cluster, ns, ref):
                continue
            owner = self._owner(cluster, ns, ref)
            meta = (owner or {}).get("metadata") or {}
            if not (meta.get("deletionTimestamp") and FOREGROUND in (meta.get("finalizers")
                                                                      or ())):
                return True
        return False

    def _owner(self, cluster: str, ns: str, ref: dict[str, Any]) -> dict[str, Any] | None:
        api_version = ref.get("apiVersion") or ""
        group = api_version.split("/", 1)[0] if "/" in api_version else ""
        info = self.api.registry(cluster).by_kind(group, ref.get("kind") or "")
        if info is None:
            return None
        return self.api.store.get(cluster, info.group_resource, ns if info.namespaced else "",
                                  ref.get("name") or "")

    def _drain_namespace(self, cluster: str, ns: str) -> None:
        api = self.api
        nsobj = api.store.get(cluster, "namespaces", "", ns)
        if nsobj is None or not nsobj["metadata"].get("deletionTimestamp"):
            api.terminating_namespaces.discard((cluster, ns))
            return
        remaining = 0
        for gr, info in api.registry(cluster).group_resources().items():
            if not info.namespaced:
                continue
            for obj in list(api.store.list(cluster, gr, ns)):
                remaining += 1
                if obj["metadata"].get("deletionTimestamp"):
                    continue
                try:
                    api.delete(cluster, info, ns, obj["metadata"]["name"],
                               DeleteOptions(propagation="Background"))
                except ApiError as e:
                    log.debug("namespace drain of %s: %s", obj["metadata"]["name"], e.message)
        if remaining == 0 or not any(
            api.store.count(cluster, gr, ns) for gr, info
            in api.registry(cluster).group_resources().items() if info.namespaced
        ):
            api.store.delete(cluster, "namespaces", "", ns)
            api.terminating_namespaces.discard((cluster, ns))


def _blocks(dep: dict[str, Any], uid: str) -> bool:
    """Whether the dependent's reference to `uid` holds the owner's foreground deletion."""
    return any(r.get("uid") == uid and r.get("blockOwnerDeletion")
               for r in dep["metadata"].get("ownerReferences") or ())


def _waiting(obj: dict[str, Any] | None) -> bool:
    """Whether an object is being deleted in the foreground (waiting for dependents)."""
    meta = (obj or {}).get("metadata") or {}
    return bool(meta.get("deletionTimestamp")) and FOREGROUND in (meta.get("finalizers") or ())
