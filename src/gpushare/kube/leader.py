"""Leader election over a ``coordination.k8s.io/v1`` Lease, as client-go's does.

Several replicas of ``gpushare controllers --leader-elect`` may run; the one holding the
Lease works, the others wait. The holder renews ``spec.renewTime`` every
``retry_period``; a candidate takes the Lease over once the record it last saw has not
changed for ``lease_duration`` (measured on the candidate's own clock from when it saw
the change, so clocks need not agree), bumping ``leaseTransitions``. Every write carries
the ``resourceVersion`` it read, so two candidates can never both win. A holder that
cannot renew within ``renew_deadline`` has lost: it must stop working at once. On a clean
stop the holder releases the Lease (empty holder), so another takes over immediately.

The same code runs against the embedded API server and a real cluster.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpushare.api.objects import Obj
from gpushare.api.timefmt import rfc3339_micro
from gpushare.kube.client import LEASES, NAMESPACES, ApiError, KubeClient

log = logging.getLogger(__name__)



def default_identity() -> str:
    return f"{socket.gethostname()}_{os.getpid()}_{uuid.uuid4().hex[:8]}"


@dataclass
class LeaderElectionConfig:
    name: str = "gpushare-controllers"
    namespace: str = "kube-system"
    identity: str = ""
    lease_duration: float = 15.0  # client-go's defaults
    renew_deadline: float = 10.0
    retry_period: float = 2.0


class LeaderElector:
    def __init__(self, client: KubeClient, config: LeaderElectionConfig,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.config = config
        self.identity = config.identity or default_identity()
        self.clock = clock
        self._observed: tuple[Any, ...] | None = None  # (holder, renewTime, transitions)
        self._observed_at = 0.0
        self._last_renew = 0.0
        self.leading = threading.Event()

    # -- one attempt ----------------------------------------------------------------------

    def _path(self) -> str:
        return LEASES.item(self.config.name, self.config.namespace)

    def _spec(self, transitions: int, acquire: str | None) -> Obj:
        now = rfc3339_micro(time.time())
        spec: Obj = {"holderIdentity": self.identity,
                     "leaseDurationSeconds": max(round(self.config.lease_duration), 1),
                     "renewTime": now, "leaseTransitions": transitions}
        spec["acquireTime"] = acquire or now
        return spec

    def try_acquire_or_renew(self) -> bool:
        """One round: True when this identity holds the Lease afterwards."""
        try:
            lease = self.client.get(self._path())
        except ApiError as error:
            log.debug("reading the leader Lease: %s", error)
            return False
        if lease is None:
            return self._create()
        spec = lease.get("spec") or {}
        record = (spec.get("holderIdentity"), spec.get("renewTime"),
                  spec.get("leaseTransitions"))
        now = self.clock()
        if record != self._observed:
            self._observed, self._observed_at = record, now
        holder = spec.get("holderIdentity") or ""
        mine = holder == self.identity
        duration = float(spec.get("leaseDurationSeconds") or self.config.lease_duration)
        if not mine and holder and now - self._observed_at < duration:
            return False  # held, and renewed recently as far as we have seen
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if mine else 1)
        body = dict(lease)
        body["spec"] = self._spec(transitions, spec.get("acquireTime") if mine else None)
        try:
            updated = self.client.replace(self._path(), body)  # carries resourceVersion
        except ApiError as error:
            log.debug("writing the leader Lease: %s", error)
            return False
        new = updated.get("spec") or {}
        self._observed = (new.get("holderIdentity"), new.get("renewTime"),
                          new.get("leaseTransitions"))
        self._observed_at = self.clock()
        return True

    def _create(self) -> bool:
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.config.name, "namespace": self.config.namespace},
                "spec": self._spec(0, None)}
        collection = LEASES.collection(self.config.namespace)
        try:
            self.client.create(collection, body)
            return True
        except ApiError as error:
            if not error.not_found:
                return False  # someone else created it first
        with contextlib.suppress(ApiError):
            self.client.create(NAMESPACES.collection(),
                               {"metadata": {"name": self.config.namespace}})
        try:
            self.client.create(collection, body)
            return True
        except ApiError:
            return False

    def release(self) -> None:
        """Give the Lease up (on a clean stop) so that another replica takes over now."""
        try:
            lease = self.client.get(self._path())
            if lease and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                body = dict(lease)
                body["spec"] = {**lease["spec"], "holderIdentity": "",
                                "leaseDurationSeconds": 1,
                                "renewTime": rfc3339_micro(time.time())}
                self.client.replace(self._path(), body)
        except ApiError as error:
            log.debug("releasing the leader Lease: %s", error)
        self.leading.clear()

    # -- the loop -------------------------------------------------------------------------

    def acquire(self, stop: threading.Event) -> bool:
        """Block until this identity leads (True) or ``stop`` is set (False)."""
        while not stop.is_set():
            if self.try_acquire_or_renew():
                self._last_renew = self.clock()
                self.leading.set()
                log.info("leader election: %s now holds %s/%s", self.identity,
                         self.config.namespace, self.config.name)
                return True
            stop.wait(self.config.retry_period)
        return False

    def keep(self, stop: threading.Event, on_lost: Callable[[], None]) -> None:
        """Renew until ``stop``; call ``on_lost`` when renewing fails past the deadline."""
        while not stop.wait(self.config.retry_period):
            if self.try_acquire_or_renew():
                self._last_renew = self.clock()
                continue
            if self.clock() - self._last_renew > self.config.renew_deadline:
                log.error("leader election: %s lost %s/%s", self.identity,
                          self.config.namespace, self.config.name)
                self.leading.clear()
                on_lost()
                return
