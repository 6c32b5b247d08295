"""The node's nftables tables for the pod network, written whole and swapped in one
transaction (``nft -f -``) each time pods, Services or endpoints change.

``inet <bridge>``:
* ``prerouting``/``output`` (nat): a ClusterIP port goes to one of its ready endpoints
  (``numgen random``: as kube-proxy, each connection picks one), a port without one is
  refused; a hostPort on a node address goes to its pod. In ``prerouting`` only packets
  from this node's bridge are translated to Services: a second pod network on the host
  (another agent) never takes this node's pods to its own endpoints, or its pods to ours.
* ``postrouting`` (nat): connections DNAT-ed into the pod network leave the node with its
  address (their replies come back through the node, also when both pods share the bridge),
  pods' traffic to other networks leaves with the node's address.
* ``input`` (filter): from the bridge, only replies, the cluster DNS on the gateway and what a
  DNAT brought in (the API server's Service) reach the node: no other port of the node.
* ``forward`` (filter): into the pod network, replies, pods of the same group (a tenant, or
  a platform namespace), and hostPort connections from elsewhere; nothing else.

``bridge <bridge>``: the same group rule for frames the bridge forwards between two pods
(they never reach the IP hooks unless br_netfilter is on), and each veth may only send
from its pod's address.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpushare.agent.runtime.network.addressing import Layout, NetworkError
from gpushare.agent.runtime.network.services import ServicePort

DNS_PORT = 53


@dataclass(frozen=True, slots=True)
class HostPort:
    port: int
    protocol: str  # tcp | udp
    pod_ip: str
    container_port: int
    host_ip: str | None = None  # None: every node address


@dataclass(frozen=True, slots=True)
class PodPort:
    """A pod's veth and its address (the anti-spoofing rule)."""

    veth: str
    ip: str


@dataclass(frozen=True, slots=True)
class Rules:
    layout: Layout
    groups: Mapping[str, Sequence[str]]  # group -> pod addresses
    pods: Sequence[PodPort] = ()
    services: Sequence[ServicePort] = ()
    host_ports: Sequence[HostPort] = ()


def nft_binary() -> str | None:
    return shutil.which("nft", path="/usr/sbin:/usr/bin:/sbin:/bin")


def probe() -> tuple[bool, str]:
    """Whether nftables is installed and this process may change the ruleset."""
    binary = nft_binary()
    if binary is None:
        return False, ("nftables (nft) is not installed (make nftables; Debian package "
                       "nftables)")
    table = "gpushare_probe"
    text = f"table inet {table} {{}}\ndelete table inet {table}\n"
    done = subprocess.run([binary, "-f", "-"], input=text, capture_output=True, text=True,
                          check=False, timeout=20)
    if done.returncode != 0:
        return False, f"nft cannot change the ruleset: {done.stderr.strip()}"
    return True, "nftables works"


def _set(name: str, addresses: Sequence[str]) -> list[str]:
    body = [f"    set {name} {{", "        type ipv4_addr"]
    if addresses:
        body.append(f"        elements = {{ {', '.join(sorted(addresses))} }}")
    return [*body, "    }"]


def _dnat(svc: ServicePort) -> str:
    match = f"ip daddr {svc.cluster_ip} {svc.protocol} dport {svc.port}"
    if not svc.backends:
        return f"{match} reject"
    if len(svc.backends) == 1:
        b = svc.backends[0]
        return f"{match} dnat ip to {b.ip}:{b.port}"
    entries = ", ".join(f"{i} : {b.ip} . {b.port}" for i, b in enumerate(svc.backends))
    return (f"{match} dnat ip to numgen random mod {len(svc.backends)} "
            f"map {{ {entries} }}")


def _host_port(hp: HostPort) -> str:
    where = f"ip daddr {hp.host_ip}" if hp.host_ip else "fib daddr type local"
    return f"{where} {hp.protocol} dport {hp.port} dnat ip to {hp.pod_ip}:{hp.container_port}"


def _group_rules(rules: Rules) -> tuple[list[str], list[str]]:
    names = {g: f"group{i}" for i, g in enumerate(sorted(rules.groups))}
    sets: list[str] = []
    accepts: list[str] = []
    for group, name in names.items():
        sets += _set(name, rules.groups[group])
        accepts.append(f"        ip saddr @{name} ip daddr @{name} accept")
    return sets, accepts


def render(rules: Rules) -> str:
    """The whole ruleset of the node's tables (replacing what was there)."""
    lay = rules.layout
    br, cidr, gw = lay.bridge, str(lay.cidr), lay.gateway
    sets, accepts = _group_rules(rules)
    services = [f"        {_dnat(s)}" for s in rules.services]
    host_ports = [f"        {_host_port(h)}" for h in rules.host_ports]
    inet = [
        f"table inet {lay.table} {{",
        *sets,
        "    chain services {", *services, "    }",
        "    chain host_ports {", *host_ports, "    }",
        "    chain prerouting {",
        "        type nat hook prerouting priority dstnat; policy accept;",
        # only this node's pods: another pod network on the host may hold a Service at
        # the same cluster IP, and the kernel runs the tables in no order we choose
        f'        iifname "{br}" jump services', "        jump host_ports", "    }",
        "    chain output {",
        "        type nat hook output priority -100; policy accept;",
        "        jump services", "        jump host_ports", "    }",
        "    chain postrouting {",
        "        type nat hook postrouting priority srcnat; policy accept;",
        f'        oifname "{br}" ct status dnat masquerade',
        f'        oifname "{br}" ip saddr 127.0.0.0/8 masquerade',
        f'        ip saddr {cidr} ip daddr != {cidr} oifname != "{br}" masquerade',
        "    }",
        "    chain input {",
        "        type filter hook input priority filter; policy accept;",
        f'        iifname "{br}" jump from_pods', "    }",
        "    chain from_pods {",
        "        ct state established,related accept",
        f"        ip daddr {gw} udp dport {DNS_PORT} accept",
        f"        ip daddr {gw} tcp dport {DNS_PORT} accept",
        "        ct status dnat accept",
        "        meta l4proto tcp reject with tcp reset",
        "        reject", "    }",
        "    chain forward {",
        "        type filter hook forward priority filter; policy accept;",
        f"        ip daddr {cidr} jump to_pods", "    }",
        "    chain to_pods {",
        "        ct state established,related accept",
        *accepts,
        f"        ip saddr {cidr} reject",
        "        ct status dnat accept",
        "        reject", "    }",
        "}",
    ]
    spoof = [f'        iifname "{p.veth}" ether type ip ip saddr != {p.ip} drop'
             for p in rules.pods]
    bridge = [
        f"table bridge {lay.table} {{",
        *sets,
        "    chain prerouting {",
        "        type filter hook prerouting priority filter; policy accept;",
        *spoof, "    }",
        "    chain forward {",
        "        type filter hook forward priority filter; policy accept;",
        f"        ether type ip ip saddr {cidr} ip daddr {cidr} jump pods", "    }",
        "    chain pods {", *accepts, "        drop", "    }",
        "}",
    ]
    return "\n".join(inet + bridge) + "\n"


def _run(text: str) -> None:
    binary = nft_binary()
    if binary is None:
        raise NetworkError("nftables (nft) is not installed")
    done = subprocess.run([binary, "-f", "-"], input=text, capture_output=True, text=True,
                          check=False, timeout=30)
    if done.returncode != 0:
        raise NetworkError(f"nft refused the pod network's rules: {done.stderr.strip()}")


def apply(rules: Rules) -> None:
    """Replace the node's tables with `rules`, atomically."""
    table = rules.layout.table
    _run(f"table inet {table} {{}}\ndelete table inet {table}\n"
         f"table bridge {table} {{}}\ndelete table bridge {table}\n" + render(rules))


def remove(layout: Layout) -> None:
    table = layout.table
    _run(f"table inet {table} {{}}\ndelete table inet {table}\n"
         f"table bridge {table} {{}}\ndelete table bridge {table}\n")


def listing(layout: Layout) -> str:
    """The node's tables as nft prints them (for tests and `describe`)."""
    binary = nft_binary()
    if binary is None:
        return ""
    out = []
    for family in ("inet", "bridge"):
        done = subprocess.run([binary, "list", "table", family, layout.table],
                              capture_output=True, text=True, check=False, timeout=30)
        out.append(done.stdout)
    return "".join(out)
