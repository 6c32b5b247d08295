"""Kernel objects of the pod network, through netlink (pyroute2): the node's bridge, and
for each pod a named network namespace (``/run/netns/<bridge>-<pod uid>``, as ``ip netns``
names them) holding ``lo`` and ``eth0``, the inside end of a veth whose host end is a port
of the bridge. Deleting the namespace deletes both ends of the veth."""

from __future__ import annotations

import contextlib
import errno
from pathlib import Path

from pyroute2 import IPRoute, NetNS, netns
from pyroute2.netlink.exceptions import NetlinkError

from gpushare.agent.runtime.network.addressing import Layout, NetworkError

NETNS_DIR = Path("/run/netns")
_SYSCTL = Path("/proc/sys/net")


def netns_path(name: str) -> str:
    return str(NETNS_DIR / name)


def _sysctl(path: str, value: str) -> None:
    target = _SYSCTL / path
    try:
        if target.read_text().strip() != value:
            target.write_text(value)
    except OSError as exc:
        raise NetworkError(f"cannot set net.{path.replace('/', '.')}={value}: {exc}") from None


def ensure_bridge(layout: Layout) -> None:
    """The bridge, up, with the gateway address; forwarding on; the bridge may carry traffic
    DNAT-ed to 127.0.0.1 (the API server's Service, hostPorts reached from the node)."""
    with IPRoute() as ipr:
        found = ipr.link_lookup(ifname=layout.bridge)
        if not found:
            ipr.link("add", ifname=layout.bridge, kind="bridge")
            found = ipr.link_lookup(ifname=layout.bridge)
        index = found[0]
        have = {(a.get_attr("IFA_ADDRESS"), a["prefixlen"])
                for a in ipr.get_addr(index=index, family=2)}
        if (layout.gateway, layout.cidr.prefixlen) not in have:
            for address, prefix in have:
                ipr.addr("del", index=index, address=address, prefixlen=prefix)
            ipr.addr("add", index=index, address=layout.gateway,
                     prefixlen=layout.cidr.prefixlen)
        ipr.link("set", index=index, state="up")
    _sysctl("ipv4/ip_forward", "1")
    _sysctl(f"ipv4/conf/{layout.bridge}/route_localnet", "1")


def remove_bridge(layout: Layout) -> None:
    with IPRoute() as ipr:
        for index in ipr.link_lookup(ifname=layout.bridge):
            ipr.link("del", index=index)


def create_pod(layout: Layout, name: str, veth: str, address: str) -> None:
    """A fresh namespace `name` for a pod at `address` (anything left under that name or
    veth is removed first)."""
    remove_pod(name, veth)
    netns.create(name)
    try:
        with IPRoute() as ipr:
            bridge = ipr.link_lookup(ifname=layout.bridge)
            if not bridge:
                raise NetworkError(f"the pod bridge {layout.bridge} is gone")
            ipr.link("add", ifname=veth, kind="veth",
                     peer={"ifname": "eth0", "net_ns_fd": name})
            host_end = ipr.link_lookup(ifname=veth)[0]
            ipr.link("set", index=host_end, master=bridge[0], state="up")
        with NetNS(name) as inside:
            inside.link("set", index=inside.link_lookup(ifname="lo")[0], state="up")
            eth0 = inside.link_lookup(ifname="eth0")[0]
            inside.addr("add", index=eth0, address=address, prefixlen=layout.cidr.prefixlen)
            inside.link("set", index=eth0, state="up")
            inside.route("add", dst="0.0.0.0/0", gateway=layout.gateway)
    except (NetlinkError, OSError) as exc:
        remove_pod(name, veth)
        raise NetworkError(f"pod network namespace {name}: {exc}") from None


def remove_pod(name: str, veth: str) -> None:
    """The pod's namespace and veth, gone (nothing to do for what is already gone)."""
    if name in netns.listnetns():
        with contextlib.suppress(OSError):
            netns.remove(name)
    with IPRoute() as ipr:
        for index in ipr.link_lookup(ifname=veth):
            try:
                ipr.link("del", index=index)
            except NetlinkError as exc:
                if exc.code != errno.ENODEV:
                    raise


def namespaces(prefix: str) -> list[str]:
    return sorted(n for n in netns.listnetns() if n.startswith(prefix))


def bridge_ports(layout: Layout) -> list[str]:
    """The names of the links enslaved to the bridge (the pods' veths)."""
    with IPRoute() as ipr:
        found = ipr.link_lookup(ifname=layout.bridge)
        if not found:
            return []
        return sorted(str(link.get_attr("IFLA_IFNAME"))
                      for link in ipr.get_links(master=found[0]))
