"""A space quota on the store, with room kept, so that a full disk never stops the
control plane for good (as etcd's `--quota-backend-bytes` and its NOSPACE alarm).

Without it, a store that fills its disk fails every commit: creates, updates and the
deletes that would free room alike (SQLite needs pages of WAL to delete). With it, the
server refuses to *grow* the store before the disk is full:

* the store's size is the bytes of its rows (kept per object as they are written);
* a write that would take it past `quota_bytes`, or any growing write while the file
  system holding the data directory has less than `reserve_bytes` free, raises the alarm;
* while the alarm is up only deletes and writes that do not grow an object go through;
  a growing write gets 507 `InsufficientStorage` naming the quota and how to free room;
* the alarm clears by itself once the store is back under `quota_bytes` less a twentieth
  (room for writes to resume without flapping) and the disk has its reserve again.

`apiserver_storage_space_alarm` (1 while up), `apiserver_storage_used_bytes` and
`apiserver_storage_quota_bytes` on /metrics show it, and a warning is logged when it changes.
A commit that fails and is rolled back leaves the sizes as if it had been written: the
figure errs towards full, never towards empty.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge

from gpushare.apiserver.errors import ApiError

log = logging.getLogger(__name__)

DEFAULT_QUOTA_BYTES = 2 * 1024**3
DEFAULT_RESERVE_BYTES = 256 * 1024**2
_DISK_CHECK_S = 1.0

Key = tuple[str, str, str, str]


class SpaceQuota:
    def __init__(self, data_dir: Path, quota_bytes: int = DEFAULT_QUOTA_BYTES,
                 reserve_bytes: int = DEFAULT_RESERVE_BYTES) -> None:
        if quota_bytes <= 0 or reserve_bytes < 0:
            raise ValueError("the storage quota must be positive and the reserve not negative")
        self.data_dir = data_dir
        self.quota_bytes = quota_bytes
        self.reserve_bytes = reserve_bytes
        self.sizes: dict[Key, int] = {}
        self.used = 0
        self.alarm = False
        self._disk_free = reserve_bytes
        self._disk_checked = float("-inf")

    def load(self, db: sqlite3.Connection) -> None:
        """Sizes of the rows stored (before the server serves)."""
        for cluster, gr, ns, name, size in db.execute(
                "SELECT cluster, gr, ns, name, LENGTH(data) FROM objects"):
            self.sizes[(cluster, gr, ns, name)] = int(size)
        self.used = sum(self.sizes.values())

    def _free(self) -> int:
        now = time.monotonic()
        if now - self._disk_checked >= _DISK_CHECK_S:
            stat = os.statvfs(self.data_dir)
            self._disk_free = stat.f_bavail * stat.f_frsize
            self._disk_checked = now
        return self._disk_free

    def _set_alarm(self, up: bool, why: str) -> None:
        if up != self.alarm:
            self.alarm = up
            if up:
                log.warning("storage space alarm raised: %s; only deletes and writes that "
                            "do not grow objects are accepted", why)
            else:
                log.warning("storage space alarm cleared: %s", why)

    def admit(self, key: Key, size: int) -> None:
        """Account a write of `size` bytes to `key`; refuse it (507) if it grows the store
        while there is no room."""
        growth = size - self.sizes.get(key, 0)
        if growth > 0:
            if self.alarm and self.used <= self.quota_bytes * 19 // 20 and \
                    self._free() >= self.reserve_bytes:
                self._set_alarm(False, f"the store holds {self.used} bytes of its "
                                       f"{self.quota_bytes}")
            if not self.alarm and self.used + growth > self.quota_bytes:
                self._set_alarm(True, f"the store would pass its quota of "
                                      f"{self.quota_bytes} bytes")
            elif not self.alarm and self._free() < self.reserve_bytes:
                self._set_alarm(True, f"{self._free()} bytes free on the disk of "
                                      f"{self.data_dir}, under the {self.reserve_bytes} kept")
            if self.alarm:
                raise ApiError(
                    507, f"storage space exceeded: the store holds {self.used} bytes "
                         f"(quota {self.quota_bytes}, {self._free()} bytes free on disk, "
                         f"{self.reserve_bytes} kept); only deletes and writes that do not "
                         "grow objects are accepted until room is freed",
                    "InsufficientStorage")
        self.sizes[key] = size
        self.used += growth

    def forget(self, key: Key) -> None:
        self.used -= self.sizes.pop(key, 0)

    def register(self, registry: CollectorRegistry) -> None:
        Gauge("apiserver_storage_space_alarm", "1 while the store's space alarm is up "
              "(only deletes and shrinking writes accepted)", registry=registry
              ).set_function(lambda: 1.0 if self.alarm else 0.0)
        Gauge("apiserver_storage_used_bytes", "Bytes of the store's rows",
              registry=registry).set_function(lambda: float(self.used))
        Gauge("apiserver_storage_quota_bytes", "The store's space quota",
              registry=registry).set_function(lambda: float(self.quota_bytes))
