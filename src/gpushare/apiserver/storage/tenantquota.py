"""Per-tenant quotas on the store: the objects and bytes one logical cluster may hold.

One server keeps every tenant's objects, so one tenant's ten thousand ConfigMaps or hundred
2.5 MB objects are everybody's memory and disk. The platform sets each tenant's quota
(tenancy: `spec.maxObjects`, `spec.maxStorageBytes` of its VirtualCluster, in the root
cluster the tenant cannot write); what plugs the quota in gives `limits_of(cluster)`. The
store asks `check` before every write: a write that adds an object past the count, or
grows the tenant's bytes past its quota, is refused with 403 naming the quota. Deletes and
writes that do not grow always go through, so a tenant over its quota (lowered by the
platform) can always get back under it. The platform's own writes (`exempt()`: the
server's, the controllers', the syncer's) are counted but never refused.

Bytes are those of the stored rows (what `space.SpaceQuota` counts too).
`apiserver_tenant_objects`, `apiserver_tenant_bytes` and their `..._quota` on /metrics
show each tenant's figures.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gpushare.api.plugins import LimitsOf, TenantLimits
from gpushare.apiserver.errors import ApiError

Key = tuple[str, str, str, str]  # (cluster, group/resource, namespace, name)




class TenantUsage:
    def __init__(self) -> None:
        self.sizes: dict[Key, int] = {}
        self.objects: dict[str, int] = {}
        self.bytes: dict[str, int] = {}
        #: who sets quotas (the plug-ins'): the first answer that is not None holds
        self.limits_of: list[LimitsOf] = []
        #: whether the write being made is the platform's (counted, never refused)
        self.exempt: Callable[[], bool] = lambda: False

    def load(self, db: sqlite3.Connection) -> None:
        for cluster, gr, ns, name, size in db.execute(
                "SELECT cluster, gr, ns, name, LENGTH(data) FROM objects"):
            self._record((cluster, gr, ns, name), int(size))

    def limits(self, cluster: str) -> TenantLimits | None:
        for limits_of in self.limits_of:
            found = limits_of(cluster)
            if found is not None:
                return found
        return None

    def check(self, key: Key, size: int) -> None:
        """Refuse (403) a write of `size` bytes to `key` that would take its tenant past
        its quota."""
        old = self.sizes.get(key)
        growth = size - (old or 0)
        if (old is not None and growth <= 0) or not self.limits_of:
            return
        cluster = key[0]
        limits = self.limits(cluster)
        if limits is None or self.exempt():
            return
        objects, held = self.objects.get(cluster, 0), self.bytes.get(cluster, 0)
        if old is None and limits.max_objects is not None and objects >= limits.max_objects:
            raise _exceeded(key, f"virtual cluster {limits.tenant!r} holds {objects} objects, "
                                 f"its quota ({limits.objects_field}) is {limits.max_objects}")
        if growth > 0 and limits.max_bytes is not None and held + growth > limits.max_bytes:
            raise _exceeded(key, f"virtual cluster {limits.tenant!r} holds {held} bytes, this "
                                 f"write adds {growth}, its quota ({limits.bytes_field}) is "
                                 f"{limits.max_bytes} bytes")

    def record(self, key: Key, size: int) -> None:
        old = self.sizes.get(key)
        if old is not None:
            self._forget(key, old)
        self._record(key, size)

    def _record(self, key: Key, size: int) -> None:
        cluster = key[0]
        self.sizes[key] = size
        self.objects[cluster] = self.objects.get(cluster, 0) + 1
        self.bytes[cluster] = self.bytes.get(cluster, 0) + size

    def forget(self, key: Key) -> None:
        old = self.sizes.get(key)
        if old is not None:
            self._forget(key, old)

    def _forget(self, key: Key, size: int) -> None:
        cluster = key[0]
        del self.sizes[key]
        self.objects[cluster] -= 1
        self.bytes[cluster] -= size

    def register(self, registry: CollectorRegistry) -> None:
        registry.register(_Gauges(self))


def _exceeded(key: Key, why: str) -> ApiError:
    _cluster, gr, _ns, name = key
    resource = gr.rsplit("/", 1)[-1]
    return ApiError(403, f'{resource} "{name}" is forbidden: exceeded quota: {why}; delete '
                         "objects of the cluster or ask the platform to raise the quota",
                    "Forbidden", {"name": name, "kind": resource})


class _Gauges(Collector):
    def __init__(self, usage: TenantUsage) -> None:
        self.usage = usage

    def collect(self) -> Iterator[GaugeMetricFamily]:
        usage = self.usage
        objects = GaugeMetricFamily("apiserver_tenant_objects", "Objects a logical cluster "
                                    "holds", labels=["cluster"])
        held = GaugeMetricFamily("apiserver_tenant_bytes", "Bytes of a logical cluster's "
                                 "stored objects", labels=["cluster"])
        max_objects = GaugeMetricFamily("apiserver_tenant_objects_quota", "A tenant's quota "
                                        "of objects", labels=["cluster"])
        max_bytes = GaugeMetricFamily("apiserver_tenant_bytes_quota", "A tenant's quota of "
                                      "bytes", labels=["cluster"])
        for cluster in sorted(usage.objects):
            objects.add_metric([cluster], float(usage.objects[cluster]))
            held.add_metric([cluster], float(usage.bytes.get(cluster, 0)))
            limits = usage.limits(cluster)
            if limits is not None and limits.max_objects is not None:
                max_objects.add_metric([cluster], float(limits.max_objects))
            if limits is not None and limits.max_bytes is not None:
                max_bytes.add_metric([cluster], float(limits.max_bytes))
        yield from (objects, held, max_objects, max_bytes)
