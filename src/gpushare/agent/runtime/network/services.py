"""Services as the node needs them: typed views over Service and EndpointSlice objects,
the DNAT table kube-proxy would make (each ClusterIP port to its ready endpoints), and the
cluster DNS names (``<svc>.<ns>.svc.cluster.local``, headless Services' pod addresses,
``<hostname>.<subdomain>.<ns>.svc.cluster.local``). Pure: no I/O."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpushare.agent.runtime.network.addressing import CLUSTER_DOMAIN, group_of
from gpushare.api.objects import Meta

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
API_SERVICE = ("default", "kubernetes")  # the API server's own Service
_PROTOCOLS = {"TCP": "tcp", "UDP": "udp"}


@dataclass(frozen=True, slots=True)
class Backend:
    ip: str
    port: int


@dataclass(frozen=True, slots=True)
class ServicePort:
    """One port of a ClusterIP: where its packets go (none ready: refused)."""

    namespace: str
    name: str
    cluster_ip: str
    port: int
    protocol: str  # tcp | udp
    backends: tuple[Backend, ...]


@dataclass(frozen=True, slots=True)
class PortSpec:
    name: str
    port: int
    protocol: str


@dataclass(frozen=True, slots=True)
class ServiceView:
    namespace: str
    name: str
    cluster_ip: str | None  # None: headless
    ports: tuple[PortSpec, ...]
    group: str

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name


@dataclass(frozen=True, slots=True)
class Endpoint:
    ip: str
    hostname: str | None
    ports: Mapping[str, tuple[int, str]] = field(default_factory=dict)  # name -> port, proto


@dataclass(frozen=True, slots=True)
class PodName:
    """A pod of this node as DNS knows it."""

    namespace: str
    ip: str
    hostname: str
    subdomain: str | None
    group: str


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def service_view(obj: Mapping[str, Any]) -> ServiceView | None:
    """The Service's ClusterIP and ports; None for ExternalName and malformed Services."""
    meta, spec = Meta.of(obj), _dict(obj.get("spec"))
    if spec.get("type") == "ExternalName" or not meta.name:
        return None
    raw_ip = spec.get("clusterIP")
    cluster_ip: str | None = None
    if isinstance(raw_ip, str) and raw_ip not in ("", "None"):
        try:
            cluster_ip = str(ipaddress.IPv4Address(raw_ip))
        except ValueError:
            return None
    elif raw_ip != "None":
        return None  # not allocated yet
    ports = []
    for p in spec.get("ports") or ():
        p = _dict(p)
        protocol = _PROTOCOLS.get(str(p.get("protocol") or "TCP"))
        if protocol is not None and isinstance(p.get("port"), int):
            ports.append(PortSpec(str(p.get("name") or ""), int(p["port"]), protocol))
    namespace = meta.namespace or "default"
    labels = {str(k): str(v) for k, v in meta.labels.items()}
    return ServiceView(namespace, meta.name, cluster_ip, tuple(ports),
                       group_of(namespace, labels))


def slice_service(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    meta = Meta.of(obj)
    name = meta.labels.get(SERVICE_NAME_LABEL)
    return (meta.namespace or "default", str(name)) if name else None


def ready_endpoints(slices: Iterable[Mapping[str, Any]]) -> list[Endpoint]:
    """The ready IPv4 endpoints of a Service's slices (no ``ready`` condition: ready)."""
    out: list[Endpoint] = []
    seen: set[str] = set()
    for sl in slices:
        if sl.get("addressType", "IPv4") != "IPv4":
            continue
        ports: dict[str, tuple[int, str]] = {}
        for p in sl.get("ports") or ():
            p = _dict(p)
            protocol = _PROTOCOLS.get(str(p.get("protocol") or "TCP"))
            if protocol is not None and isinstance(p.get("port"), int):
                ports[str(p.get("name") or "")] = (int(p["port"]), protocol)
        for ep in sl.get("endpoints") or ():
            ep = _dict(ep)
            if _dict(ep.get("conditions")).get("ready") is False:
                continue
            for address in ep.get("addresses") or ():
                if isinstance(address, str) and address not in seen:
                    seen.add(address)
                    hostname = ep.get("hostname")
                    out.append(Endpoint(address, hostname if isinstance(hostname, str)
                                        else None, ports))
    return sorted(out, key=lambda e: ipaddress.IPv4Address(e.ip))


def proxy_table(services: Iterable[ServiceView],
                endpoints: Mapping[tuple[str, str], list[Endpoint]],
                pod_address: Callable[[str], bool]) -> list[ServicePort]:
    """Each ClusterIP port and its backends. A backend must be a pod address (a Service may
    not lead a pod to the node's own ports), except the endpoints of the API server's
    Service, which is how pods reach the API."""
    table = []
    for svc in services:
        if svc.cluster_ip is None:
            continue
        eps = endpoints.get(svc.key, [])
        for spec in svc.ports:
            backends = []
            for ep in eps:
                found = ep.ports.get(spec.name)
                if found is None or found[1] != spec.protocol:
                    continue
                if svc.key != API_SERVICE and not pod_address(ep.ip):
                    continue
                backends.append(Backend(ep.ip, found[0]))
            table.append(ServicePort(svc.namespace, svc.name, svc.cluster_ip, spec.port,
                                     spec.protocol, tuple(backends)))
    return table


@dataclass(frozen=True, slots=True)
class DnsRecord:
    group: str  # only pods of this group get an answer (or every pod, for the API's)
    addresses: tuple[str, ...]


def dns_names(services: Iterable[ServiceView],
              endpoints: Mapping[tuple[str, str], list[Endpoint]],
              pods: Iterable[PodName], domain: str = CLUSTER_DOMAIN) -> dict[str, DnsRecord]:
    """Fully qualified lower-case names (trailing dot) to their A records."""
    names: dict[str, DnsRecord] = {}
    headless: set[tuple[str, str]] = set()
    for svc in services:
        base = f"{svc.name}.{svc.namespace}.svc.{domain}.".lower()
        group = "*" if svc.key == API_SERVICE else svc.group
        eps = endpoints.get(svc.key, [])
        if svc.cluster_ip is not None:
            names[base] = DnsRecord(group, (svc.cluster_ip,))
            continue
        headless.add(svc.key)
        names[base] = DnsRecord(group, tuple(e.ip for e in eps))
        for ep in eps:
            if ep.hostname:
                names[f"{ep.hostname}.{base}".lower()] = DnsRecord(group, (ep.ip,))
    for pod in pods:
        group = pod.group
        dashed = pod.ip.replace(".", "-")
        names[f"{dashed}.{pod.namespace}.pod.{domain}.".lower()] = DnsRecord(group, (pod.ip,))
        if pod.subdomain and (pod.namespace, pod.subdomain) in headless:
            fqdn = f"{pod.hostname}.{pod.subdomain}.{pod.namespace}.svc.{domain}."
            names[fqdn.lower()] = DnsRecord(group, (pod.ip,))
    return names
