"""The node's pod network as the agent uses it: `open_network` probes what the node can do
(root, nftables, the bridge), `PodNetwork.attach` gives a pod its namespace and address
before its containers start, `detach` takes them away when the pod is gone, `cleanup`
after a restart keeps the namespaces of the pods still bound here and removes the rest.
Services and EndpointSlices are watched through the API; every change rewrites the node's
nftables tables and the DNS names.

Modes (``--pod-network``): ``auto`` (isolated when the node can, else the node's network
with the reason on the Node and tenants' pods refused), ``isolated`` (the agent does not
start without it), ``host`` (the node's network, said on the Node; tenants' pods refused).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import os
import socket
import threading
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from pyroute2 import netns as pyroute2_netns
from pyroute2.netlink.exceptions import NetlinkError

from gpushare.agent.runtime.network import firewall, links
from gpushare.agent.runtime.network.addressing import (
    Layout,
    LayoutLock,
    NetworkError,
    claim_layout,
    group_of,
    is_tenant_namespace,
)
from gpushare.agent.runtime.network.dns import (
    ClusterDns,
    ClusterResolver,
    host_nameserver,
    hosts_file,
    resolv_conf,
)
from gpushare.agent.runtime.network.services import (
    API_SERVICE,
    DnsRecord,
    Endpoint,
    PodName,
    ServiceView,
    dns_names,
    proxy_table,
    ready_endpoints,
    service_view,
    slice_service,
)
from gpushare.agent.runtime.sandbox import SandboxState, save_state
from gpushare.api.objects import Meta
from gpushare.kube.client import ENDPOINTSLICES, SERVICES, KubeClient, Stopper
from gpushare.kube.informer import Informer

log = logging.getLogger("gpushare.agent")

AUTO, ISOLATED, HOST = "auto", "isolated", "host"
CONDITION = "PodNetworkIsolated"  # the Node condition (`kubectl describe node`)
MODES = (AUTO, ISOLATED, HOST)
RESOLV_CONF, HOSTS = "resolv.conf", "hosts"


@dataclass(frozen=True, slots=True)
class Attachment:
    """A pod's place on the node's network (``<data dir>/network/<uid>.json``)."""

    uid: str
    namespace: str
    name: str
    ip: str
    netns: str
    veth: str
    group: str
    hostname: str
    subdomain: str | None = None
    host_ports: tuple[firewall.HostPort, ...] = field(default=())

    @property
    def netns_path(self) -> str:
        return links.netns_path(self.netns)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Attachment:
        raw = json.loads(text)
        raw["host_ports"] = tuple(firewall.HostPort(**h) for h in raw.get("host_ports") or ())
        return cls(**raw)


def _host_ports(pod: Mapping[str, Any]) -> tuple[tuple[int, str, int, str | None], ...]:
    out = []
    for c in (pod.get("spec") or {}).get("containers") or ():
        for p in (c.get("ports") or ()) if isinstance(c, dict) else ():
            if isinstance(p, dict) and isinstance(p.get("hostPort"), int) and p["hostPort"]:
                protocol = str(p.get("protocol") or "TCP").lower()
                out.append((int(p["hostPort"]), protocol, int(p.get("containerPort") or
                                                                p["hostPort"]),
                            p.get("hostIP") or None))
    return tuple(out)


def host_network(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("hostNetwork"))


class PodNetwork:
    """One node's pod network (see the module's docstring); `layout` None: unavailable."""

    def __init__(self, kube: KubeClient | None, lock: LayoutLock | None, state_dir: Path,
                 reason: str, dns_port: int = 53) -> None:
        self.kube = kube
        self._lock_file = lock
        self.layout: Layout | None = lock.layout if lock is not None else None
        self.reason = reason
        self.state_dir = state_dir
        self._dns_port = dns_port
        self._lock = threading.RLock()
        self._attached: dict[str, Attachment] = {}
        self._stopper = Stopper()
        self._services: Informer | None = None
        self._slices: Informer | None = None
        self._names: dict[str, DnsRecord] = {}
        self._by_ip: dict[str, str] = {}  # pod address -> group
        self._rendered = ""
        self._dirty = threading.Event()
        self._dns: ClusterDns | None = None
        self._thread: threading.Thread | None = None

    # --- what the node can do ---------------------------------------------------------

    @property
    def available(self) -> bool:
        return self.layout is not None

    def describe(self) -> str:
        if self.layout is None:
            return f"the node's network: {self.reason}; tenants' pods are refused"
        return (f"isolated: a network namespace per pod on bridge {self.layout.bridge} "
                f"({self.layout.cidr}); tenants apart, the node's ports closed to pods, "
                "Services and DNS")

    def condition(self, heartbeat: str, since: str) -> dict[str, Any]:
        """The Node condition saying whether pods get networks of their own (times in
        RFC 3339)."""
        return {"type": CONDITION, "status": "True" if self.available else "False",
                "reason": "Isolated" if self.available else "NodeNetwork",
                "message": self.describe(), "lastHeartbeatTime": heartbeat,
                "lastTransitionTime": since}

    def refusal(self, pod: Mapping[str, Any]) -> tuple[str, str] | None:
        """(reason, message) when the pod may not run on this node's network."""
        namespace = Meta.of(pod).namespace or "default"
        if not is_tenant_namespace(namespace):
            return None
        if host_network(pod):
            return ("HostNetworkForbidden", "spec.hostNetwork: pods of a tenant cannot share "
                    "the node's network namespace (a platform administrator's privilege)")
        if self.layout is None:
            return ("NetworkUnavailable", "this node cannot isolate pods' networks "
                    f"({self.reason}); pods of tenants are not run here")
        return None

    def wants_namespace(self, pod: Mapping[str, Any]) -> bool:
        return self.layout is not None and not host_network(pod)

    # --- life -------------------------------------------------------------------------

    def start(self) -> None:
        if self.layout is None:
            return
        self.state_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.state_dir, 0o700)
        links.ensure_bridge(self.layout)
        for path in self.state_dir.glob("*.json"):
            with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
                att = Attachment.from_json(path.read_text())
                self._attached[att.uid] = att
        self._apply()
        resolver = ClusterResolver(lambda: self._names, lambda ip: self._by_ip.get(ip),
                                   host_nameserver())
        self._dns = ClusterDns(resolver, self.layout.gateway, self._dns_port)
        self._dns.start()
        if self.kube is not None:
            self._services = Informer(self.kube, SERVICES, self._stopper)
            self._slices = Informer(self.kube, ENDPOINTSLICES, self._stopper)
            for informer in (self._services, self._slices):
                informer.add_handler(lambda *_: self._dirty.set())
                informer.start()
        self._thread = threading.Thread(target=self._loop, name="pod network", daemon=True)
        self._thread.start()

    def stop(self, teardown: bool = False) -> None:
        """Stop watching and serving DNS; with `teardown` remove everything (`teardown`),
        else the pods' namespaces and the rules stay (a restarted agent adopts them)."""
        if teardown:
            self.teardown()
        self._stopper.stop()
        self._dirty.set()
        for informer in (self._services, self._slices):
            if informer is not None:
                informer.stop()
        if self._dns is not None:
            self._dns.stop()
        if self._lock_file is not None:
            self._lock_file.release()

    def teardown(self) -> None:
        """Everything of this node's network gone: namespaces, veths, rules, the bridge."""
        if self.layout is None:
            return
        with self._lock:
            for att in list(self._attached.values()):
                self.detach(att.uid)
            self.cleanup(())
            with contextlib.suppress(NetworkError):
                firewall.remove(self.layout)
            with contextlib.suppress(NetlinkError, OSError):
                links.remove_bridge(self.layout)

    def _loop(self) -> None:
        while not self._stopper.stopped:
            self._dirty.wait(1.0)
            if self._stopper.stopped:
                return
            if self._dirty.is_set():
                self._dirty.clear()
                try:
                    self._apply()
                except Exception:  # the next change tries again
                    log.exception("pod network: applying the rules failed")
                    self._dirty.set()

    # --- pods -------------------------------------------------------------------------

    def attached(self, uid: str) -> Attachment | None:
        with self._lock:
            return self._attached.get(uid)

    def attach(self, pod: Mapping[str, Any]) -> Attachment:
        """The pod's namespace and address (the recorded ones when they are still there),
        its rules in place before this returns."""
        layout = self.layout
        if layout is None:
            raise NetworkError(self.reason)
        meta, spec = Meta.of(pod), pod.get("spec") or {}
        uid = meta.uid
        with self._lock:
            known = self._attached.get(uid)
            if known is not None and known.netns in links.namespaces(known.netns):
                return known
            used = {a.ip for a in self._attached.values()}
            ip = next((a for a in layout.pod_addresses() if a not in used), None)
            if ip is None:
                raise NetworkError(f"no free pod address in {layout.cidr}")
            namespace = meta.namespace or "default"
            labels = {str(k): str(v) for k, v in meta.labels.items()}
            att = Attachment(
                uid, namespace, meta.name, ip, layout.netns_name(uid),
                layout.veth_name(uid), group_of(namespace, labels),
                str(spec.get("hostname") or meta.name or "pod")[:63],
                spec.get("subdomain") or None,
                tuple(firewall.HostPort(port, proto, ip, target, host_ip)
                      for port, proto, target, host_ip in _host_ports(pod)))
            links.create_pod(layout, att.netns, att.veth, ip)
            self._record(att)
            try:
                self._apply()
            except NetworkError:
                self.detach(uid)
                raise
            return att

    def detach(self, uid: str) -> None:
        with self._lock:
            att = self._attached.pop(uid, None)
            if att is None:
                return
            links.remove_pod(att.netns, att.veth)
            with contextlib.suppress(FileNotFoundError):
                (self.state_dir / f"{uid}.json").unlink()
            self._apply()

    def release(self, uid: str) -> None:
        """`detach`, for a pod whose object is gone: a failure is logged (the next agent
        start's `cleanup` removes what is left)."""
        try:
            self.detach(uid)
        except Exception:
            log.exception("pod %s: removing its network namespace failed", uid)

    def netns_of(self, uid: str) -> str | None:
        att = self.attached(uid)
        return att.netns if att is not None else None

    def node_spec(self) -> dict[str, Any]:
        """The Node's ``spec.podCIDR(s)`` (nothing when pods share the node's network)."""
        if self.layout is None:
            return {}
        return {"podCIDR": str(self.layout.cidr), "podCIDRs": [str(self.layout.cidr)]}

    def sandbox_for(self, pod: Mapping[str, Any],
                    state: SandboxState) -> tuple[SandboxState, str | None]:
        """The pod's sandbox in its network namespace, with its resolv.conf and hosts bound
        in, and its address; unchanged and None for a pod on the node's network."""
        if not self.wants_namespace(pod):
            return state, None
        att = self.attach(pod)
        files = self.pod_files(att, state.meta / "network")
        if (state.netns, state.files) != (att.netns_path, files):
            state = replace(state, netns=att.netns_path, files=files)
            save_state(state)
        return state, att.ip

    @staticmethod
    def with_address(pod: dict[str, Any], pod_ip: str | None) -> dict[str, Any]:
        """The pod as its containers' environment sees it: ``status.podIP(s)`` are its own
        address (the downward API's ``status.podIP``) before the agent has written them."""
        if pod_ip is None:
            return pod
        status = {**(pod.get("status") or {}), "podIP": pod_ip, "podIPs": [{"ip": pod_ip}]}
        return {**pod, "status": status}

    def cleanup(self, live: Iterable[str]) -> list[str]:
        """Remove the namespaces, veths and records of pods not in `live` (uids); which."""
        if self.layout is None:
            return []
        keep = set(live)
        removed = []
        with self._lock:
            for uid in [u for u in self._attached if u not in keep]:
                self.detach(uid)
                removed.append(uid)
            for name in links.namespaces(self.layout.netns_prefix):
                uid = name[len(self.layout.netns_prefix):]
                if uid not in keep or uid not in self._attached:
                    links.remove_pod(name, self.layout.veth_name(uid))
                    removed.append(uid)
            self._apply()
        if removed:
            log.info("removed the network namespaces of pods gone: %s", removed)
        return removed

    def _record(self, att: Attachment) -> None:
        self._attached[att.uid] = att
        path = self.state_dir / f"{att.uid}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(att.to_json())
        tmp.replace(path)

    def pod_files(self, att: Attachment, directory: Path) -> tuple[tuple[str, str], ...]:
        """The pod's /etc/resolv.conf and /etc/hosts, written in `directory`: (host path,
        path in the pod) pairs for the sandbox to bind read-only."""
        assert self.layout is not None
        directory.mkdir(parents=True, exist_ok=True)
        out = []
        for name, text in ((RESOLV_CONF, resolv_conf(self.layout.gateway, att.namespace)),
                           (HOSTS, hosts_file(att.ip, att.hostname, att.subdomain,
                                              att.namespace))):
            path = directory / name
            path.write_text(text)
            os.chmod(path, 0o644)
            out.append((str(path), f"/etc/{name}"))
        return tuple(out)

    # --- Services and rules -------------------------------------------------------------

    def api_env(self, pod: Mapping[str, Any]) -> dict[str, str]:
        """KUBERNETES_SERVICE_HOST/PORT: the API server's Service, as a pod on its own
        network sees it (nothing for a pod on the node's network)."""
        if not self.wants_namespace(pod):
            return {}
        view = self._service(*API_SERVICE)
        if view is None or view.cluster_ip is None or not view.ports:
            return {}
        port = view.ports[0].port
        return {"KUBERNETES_SERVICE_HOST": view.cluster_ip,
                "KUBERNETES_SERVICE_PORT": str(port),
                "KUBERNETES_SERVICE_PORT_HTTPS": str(port)}

    def _service(self, namespace: str, name: str) -> ServiceView | None:
        obj = None
        if self._services is not None and self._services.synced:
            obj = self._services.get(f"{namespace}/{name}")
        elif self.kube is not None:
            with contextlib.suppress(Exception):
                obj = self.kube.get(SERVICES.item(name, namespace))
        return service_view(obj) if obj else None

    def _service_state(self) -> tuple[list[ServiceView], dict[tuple[str, str], list[Endpoint]]]:
        views = [v for o in (self._services.items() if self._services else [])
                 if (v := service_view(o)) is not None]
        grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for sl in self._slices.items() if self._slices else []:
            key = slice_service(sl)
            if key is not None:
                grouped.setdefault(key, []).append(sl)
        return views, {k: ready_endpoints(v) for k, v in grouped.items()}

    def _apply(self) -> None:
        layout = self.layout
        if layout is None:
            return
        with self._lock:
            atts = list(self._attached.values())
            views, endpoints = self._service_state()
            groups: dict[str, list[str]] = {}
            for att in atts:
                groups.setdefault(att.group, []).append(att.ip)
            rules = firewall.Rules(
                layout, groups, [firewall.PodPort(a.veth, a.ip) for a in atts],
                proxy_table(views, endpoints,
                            lambda ip: ipaddress.IPv4Address(ip) in layout.cidr),
                [h for a in atts for h in a.host_ports])
            text = firewall.render(rules)
            if text != self._rendered:
                firewall.apply(rules)
                self._rendered = text
            self._names = dns_names(views, endpoints, [
                PodName(a.namespace, a.ip, a.hostname, a.subdomain, a.group) for a in atts])
            self._by_ip = {a.ip: a.group for a in atts}


def dial(netns_name: str, port: int, timeout: float = 10.0) -> socket.socket:
    """A TCP connection to ``localhost:port`` inside the network namespace `netns_name`
    (kubectl port-forward). The socket is made in the namespace by a short-lived child
    process and handed back; no thread of the agent ever changes its own network namespace
    (a thread that did would take every probe or connection it makes meanwhile, and every
    thread it starts, into the pod's network)."""
    sock = pyroute2_netns.create_socket(netns_name, flags=0)
    try:
        sock.settimeout(timeout)
        sock.connect(("127.0.0.1", port))
    except BaseException:
        sock.close()
        raise
    return sock


def open_network(kube: KubeClient | None, mode: str, cidr: str, data_dir: Path,
                 dns_port: int = 53) -> PodNetwork:
    """The node's pod network for ``--pod-network`` `mode` and ``--pod-cidr`` `cidr`;
    unavailable (with the reason) where the node cannot isolate and `mode` allows it."""
    state_dir = data_dir / "network"
    if mode not in MODES:
        raise NetworkError(f"--pod-network: {mode!r} is not one of {', '.join(MODES)}")
    if mode == HOST:
        return PodNetwork(kube, None, state_dir, "--pod-network host")
    why = None
    if os.geteuid() != 0:
        why = "the agent is not root: it cannot make network namespaces (CAP_NET_ADMIN)"
    else:
        ok, probe = firewall.probe()
        why = None if ok else probe
    if why is None:
        lock = claim_layout(cidr, data_dir)
        try:
            links.ensure_bridge(lock.layout)
            return PodNetwork(kube, lock, state_dir, "isolated", dns_port)
        except (NetworkError, NetlinkError, OSError) as exc:
            lock.release()
            why = f"the pod bridge cannot be made: {exc}"
    if mode == ISOLATED:
        raise NetworkError(f"--pod-network isolated: {why}")
    log.warning("pod network: %s; pods share the node's network and tenants' pods are "
                "refused", why)
    return PodNetwork(kube, None, state_dir, why)
