"""The node's pod address plan: the pod CIDR, the bridge, and the names of each pod's
network namespace and veth; which group of pods may talk to each other.

One agent owns one pod CIDR on a machine: it holds ``/run/gpushare/net/<bridge>.lock``
(an advisory lock that dies with the agent) for its whole life, so two agents on one
machine (tests, several nodes of a demo) never share a bridge or an address. With the
default ``auto`` CIDR the agent takes ``10.244.<n>.0/24``, ``n`` from its data directory's
digest (a restarted agent finds its bridge and its pods' namespaces again), moving on to
the next ``n`` whose lock is free."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import ipaddress
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

LOCK_DIR = Path("/run/gpushare/net")
AUTO = "auto"
AUTO_BASE = ipaddress.IPv4Network("10.244.0.0/16")
BRIDGE_PREFIX = "gpushare"
VETH_PREFIX = "gpv"
CLUSTER_DOMAIN = "cluster.local"
# Tenants' pods are synced into host namespaces named vc-<tenant>; the syncer labels them
# with the tenant (a reserved label a tenant cannot set). Both name the same tenant.
TENANT_NAMESPACE_PREFIX = "vc-"
TENANT_LABEL = "tenancy.gpushare.io/tenant"


class NetworkError(RuntimeError):
    """The pod network cannot be set up as asked (the message says what and why)."""


@dataclass(frozen=True, slots=True)
class Layout:
    """Where the node's pods live: their CIDR, the bridge (its address is the CIDR's first,
    the pods' gateway and DNS server) and the nftables tables named after it."""

    cidr: ipaddress.IPv4Network
    bridge: str

    @property
    def gateway(self) -> str:
        return str(self.cidr.network_address + 1)

    @property
    def table(self) -> str:
        return self.bridge

    @property
    def netns_prefix(self) -> str:
        return f"{self.bridge}-"

    def netns_name(self, uid: str) -> str:
        return f"{self.netns_prefix}{uid}"

    def veth_name(self, uid: str) -> str:
        """The host end of the pod's veth (15 characters at most, as the kernel wants)."""
        return VETH_PREFIX + hashlib.sha256(f"{self.bridge}/{uid}".encode()).hexdigest()[:11]

    def pod_addresses(self) -> Iterable[str]:
        gateway = self.cidr.network_address + 1
        for address in self.cidr.hosts():
            if address != gateway:
                yield str(address)


def parse_cidr(text: str) -> ipaddress.IPv4Network:
    """A pod CIDR: IPv4, between /16 and /29 (room for a gateway and pods)."""
    try:
        cidr = ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        raise NetworkError(f"--pod-cidr: {text!r} is not a network address ({exc})") from None
    if not isinstance(cidr, ipaddress.IPv4Network):
        raise NetworkError(f"--pod-cidr: {text!r}: only IPv4 pod networks are supported")
    if not 16 <= cidr.prefixlen <= 29:
        raise NetworkError(f"--pod-cidr: {text!r}: the prefix must be between /16 and /29")
    return cidr


def bridge_for(cidr: ipaddress.IPv4Network) -> str:
    """``gpushare<n>`` for ``10.244.<n>.0/24``; other CIDRs get a digest."""
    if cidr.prefixlen == 24 and cidr.subnet_of(AUTO_BASE):
        return f"{BRIDGE_PREFIX}{int(cidr.network_address.packed[2])}"
    return f"{BRIDGE_PREFIX}{hashlib.sha256(str(cidr).encode()).hexdigest()[:7]}"


class LayoutLock:
    """The advisory lock that makes a layout this agent's (released when it stops or dies)."""

    def __init__(self, layout: Layout, handle: IO[str]) -> None:
        self.layout = layout
        self._handle = handle

    def release(self) -> None:
        with contextlib.suppress(OSError):
            fcntl.flock(self._handle, fcntl.LOCK_UN)
        self._handle.close()


def _try_lock(layout: Layout) -> LayoutLock | None:
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    handle = open(LOCK_DIR / f"{layout.bridge}.lock", "a+")  # noqa: SIM115 (kept open)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        return None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()} {layout.cidr}\n")
    handle.flush()
    return LayoutLock(layout, handle)


def claim_layout(requested: str, data_dir: Path) -> LayoutLock:
    """The layout for ``--pod-cidr`` (``auto`` or a CIDR), locked for this agent."""
    if requested != AUTO:
        cidr = parse_cidr(requested)
        layout = Layout(cidr, bridge_for(cidr))
        lock = _try_lock(layout)
        if lock is None:
            raise NetworkError(f"--pod-cidr {requested}: another agent on this machine uses "
                               f"it (bridge {layout.bridge})")
        return lock
    start = int(hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest(), 16) % 254 + 1
    for step in range(254):
        n = (start - 1 + step) % 254 + 1
        cidr = ipaddress.IPv4Network(f"10.244.{n}.0/24")
        lock = _try_lock(Layout(cidr, bridge_for(cidr)))
        if lock is not None:
            return lock
    raise NetworkError("--pod-cidr auto: every 10.244.<n>.0/24 is used by an agent here")


def group_of(namespace: str, labels: dict[str, str] | None = None) -> str:
    """Which pods may reach each other: those of one tenant (its host namespaces), or, for
    the platform's own namespaces, those of one namespace."""
    if namespace.startswith(TENANT_NAMESPACE_PREFIX):
        tenant = (labels or {}).get(TENANT_LABEL) or namespace[len(TENANT_NAMESPACE_PREFIX):]
        return f"tenant/{tenant}"
    return f"namespace/{namespace}"


def is_tenant_namespace(namespace: str) -> bool:
    return namespace.startswith(TENANT_NAMESPACE_PREFIX)
