"""Per-tenant rate of pod creation: a token bucket per virtual cluster.

A tenant's Deployment at 100,000 replicas makes its controllers create pods as fast as the
API answers; every one is synced to the host and weighed by the host's scheduler. The
platform sets `podCreateRate` (pods per second) and `podCreateBurst` on the tenant's
VirtualCluster; creates past them answer 429 TooManyRequests (with the seconds to wait),
which the controllers take as "later", so one tenant cannot crowd out the others' pods.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class _Bucket:
    tokens: float
    at: float


@dataclass
class CreateRateLimiter:
    """Token buckets by tenant; `clock` is monotonic."""

    clock: Callable[[], float] = time.monotonic
    _buckets: dict[str, _Bucket] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, tenant: str, rate: float, burst: int) -> float:
        """Take one create for `tenant`: 0 when allowed, else the seconds until one is."""
        now = self.clock()
        with self._lock:
            bucket = self._buckets.get(tenant)
            if bucket is None:
                bucket = self._buckets[tenant] = _Bucket(float(burst), now)
            bucket.tokens = min(float(burst), bucket.tokens + (now - bucket.at) * rate)
            bucket.at = now
            if bucket.tokens >= 1.0:
                bucket.tokens -= 1.0
                return 0.0
            return (1.0 - bucket.tokens) / rate
