"""The cluster DNS of a node (what CoreDNS is in a cluster): a small server on the bridge
address, answering the names of `services.dns_names` to the pods of this node (a name of
another group's namespace is NXDOMAIN to a pod: tenants do not learn each other's
Services), and passing other names on to the node's own resolver. Built on dnslib."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from dnslib import QTYPE, RCODE, RR, A, DNSRecord
from dnslib.server import BaseResolver, DNSLogger, DNSServer

from gpushare.agent.runtime.network.addressing import CLUSTER_DOMAIN
from gpushare.agent.runtime.network.services import DnsRecord

log = logging.getLogger("gpushare.agent")

TTL = 5
UPSTREAM_TIMEOUT_S = 2.0


def host_nameserver(resolv_conf: Path = Path("/etc/resolv.conf")) -> str | None:
    """The node's first nameserver (where names outside the cluster are asked)."""
    with contextlib.suppress(OSError):
        for line in resolv_conf.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0] == "nameserver":
                return parts[1]
    return None


def resolv_conf(nameserver: str, namespace: str, domain: str = CLUSTER_DOMAIN) -> str:
    """A pod's /etc/resolv.conf, as the kubelet writes it for ``ClusterFirst``."""
    return (f"search {namespace}.svc.{domain} svc.{domain} {domain}\n"
            f"nameserver {nameserver}\noptions ndots:5\n")


def hosts_file(ip: str, hostname: str, subdomain: str | None, namespace: str,
               domain: str = CLUSTER_DOMAIN) -> str:
    """A pod's /etc/hosts, as the kubelet writes it."""
    names = hostname
    if subdomain:
        names = f"{hostname}.{subdomain}.{namespace}.svc.{domain} {hostname}"
    return ("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
            f"{ip}\t{names}\n")


class ClusterResolver(BaseResolver):  # type: ignore[misc]
    """Answers from `names()` for the cluster domain; `group_of(client address)` says which
    group a querying pod is in."""

    def __init__(self, names: Callable[[], Mapping[str, DnsRecord]],
                 group_of: Callable[[str], str | None], upstream: str | None,
                 domain: str = CLUSTER_DOMAIN) -> None:
        self._names = names
        self._group_of = group_of
        self._upstream = upstream
        self._suffix = f"{domain}.".lower()

    def resolve(self, request: DNSRecord, handler: Any) -> DNSRecord:
        reply = request.reply()
        qname = str(request.q.qname).lower()
        if qname != self._suffix and not qname.endswith("." + self._suffix):
            return self._forward(request, reply)
        record = self._names().get(qname)
        group = self._group_of(str(handler.client_address[0]))
        if record is None or group is None or record.group not in ("*", group):
            reply.header.rcode = RCODE.NXDOMAIN
            return reply
        if request.q.qtype in (QTYPE.A, QTYPE.ANY):
            for address in record.addresses:
                reply.add_answer(RR(request.q.qname, QTYPE.A, rdata=A(address), ttl=TTL))
        return reply

    def _forward(self, request: DNSRecord, reply: DNSRecord) -> DNSRecord:
        if self._upstream is None:
            reply.header.rcode = RCODE.SERVFAIL
            return reply
        try:
            answer = request.send(self._upstream, 53, timeout=UPSTREAM_TIMEOUT_S)
            return DNSRecord.parse(answer)
        except (TimeoutError, OSError, ValueError):
            reply.header.rcode = RCODE.SERVFAIL
            return reply


class ClusterDns:
    """The UDP and TCP servers on ``address:53`` (threads of their own)."""

    def __init__(self, resolver: ClusterResolver, address: str, port: int = 53) -> None:
        quiet = DNSLogger(log="-request,-reply,-truncated,-error,-recv,-send,-data",
                          prefix=False, logf=lambda text: log.debug("dns: %s", text))
        self._servers = [DNSServer(resolver, address=address, port=port, tcp=tcp,
                                   logger=quiet) for tcp in (False, True)]
        self._lock = threading.Lock()

    def start(self) -> None:
        for server in self._servers:
            server.start_thread()

    def stop(self) -> None:
        for server in self._servers:
            with contextlib.suppress(Exception):
                server.stop()
                server.server.server_close()
