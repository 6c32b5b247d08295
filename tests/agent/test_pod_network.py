"""The pod network's kernel side, with real namespaces, veths, a bridge and nftables (the
agent runs as root here; no API server: the pods are given to `PodNetwork` directly).
What each check needs from the machine is installed by the project (`make nftables`);
a missing piece fails the test."""

from __future__ import annotations

import ipaddress
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from gpushare.agent.runtime.network import firewall, links
from gpushare.agent.runtime.network.addressing import Layout, NetworkError, parse_cidr
from gpushare.agent.runtime.network.podnet import PodNetwork, dial, open_network
from gpushare.agent.runtime.network.services import (
    Backend,
    Endpoint,
    PodName,
    PortSpec,
    ServiceView,
    dns_names,
    proxy_table,
)

CIDR = "10.244.231.0/24"


def _pod(uid: str, namespace: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "namespace": namespace, "name": uid}, "spec": spec}


@pytest.fixture
def net(tmp_path: Path) -> Iterator[PodNetwork]:
    network = open_network(None, "isolated", CIDR, tmp_path, dns_port=0)
    network.start()
    yield network
    network.teardown()
    network.stop()


def _in_ns(netns: str, code: str, timeout: float = 10) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["nsenter", f"--net={links.netns_path(netns)}", sys.executable,
                           "-c", code], capture_output=True, text=True, timeout=timeout,
                          check=False)


def _connect(netns: str, ip: str, port: int) -> str:
    done = _in_ns(netns, "import socket\ntry:\n"
                  f"    socket.create_connection(('{ip}', {port}), timeout=1.5)\n"
                  "    print('connected')\nexcept OSError as e:\n    print(type(e).__name__)")
    return done.stdout.strip() or done.stderr


def _serve(netns: str | None, port: int) -> subprocess.Popen[bytes]:
    prefix = ["nsenter", f"--net={links.netns_path(netns)}"] if netns else []
    server = subprocess.Popen([*prefix, sys.executable, "-m", "http.server", str(port),
                               "--bind", "0.0.0.0"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    return server


def _wait_listening(netns: str | None, port: int) -> None:
    code = ("import socket,time\nfor _ in range(100):\n    try:\n"
            f"        socket.create_connection(('127.0.0.1', {port}), timeout=1); break\n"
            "    except OSError: time.sleep(0.05)\n")
    if netns is None:
        subprocess.run([sys.executable, "-c", code], check=True, timeout=20)
    else:
        _in_ns(netns, code, 20)


def test_each_pod_has_its_namespace_address_and_loopback(net: PodNetwork) -> None:
    a = net.attach(_pod("u-a", "team"))
    b = net.attach(_pod("u-b", "team"))
    assert a.ip != b.ip
    assert {a.ip, b.ip} <= {str(h) for h in ipaddress.ip_network(CIDR).hosts()}
    assert net.layout is not None and net.layout.gateway not in (a.ip, b.ip)
    shown = _in_ns(a.netns, "import socket; print(socket.gethostbyname('localhost'))")
    assert shown.returncode == 0
    addresses = subprocess.run(["ip", "-n", a.netns, "-o", "-4", "addr"], capture_output=True,
                               text=True, check=True).stdout
    assert f"inet {a.ip}/24" in addresses and "lo    inet 127.0.0.1/8" in addresses
    # both bind the same port: each in its own namespace
    servers = [_serve(a.netns, 8080), _serve(b.netns, 8080)]
    try:
        _wait_listening(a.netns, 8080)
        _wait_listening(b.netns, 8080)
        assert all(s.poll() is None for s in servers)
        assert _connect(a.netns, b.ip, 8080) == "connected"
        # the agent dials a pod's own localhost (port-forward), from threads that stay in
        # the node's network namespace (several at once)
        own = os.readlink(f"/proc/self/task/{threading.get_native_id()}/ns/net")
        with ThreadPoolExecutor(4) as pool:
            dialed = list(pool.map(lambda _: dial(b.netns, 8080), range(8)))
            seen = set(pool.map(lambda _: os.readlink(
                f"/proc/self/task/{threading.get_native_id()}/ns/net"), range(8)))
        assert all(d.getpeername() == ("127.0.0.1", 8080) for d in dialed)
        for d in dialed:
            d.close()
        assert seen == {own}
        # a namespace that is gone is an error, never made afresh
        with pytest.raises(OSError):
            dial(b.netns + "-gone", 8080)
        assert not os.path.exists(links.netns_path(b.netns + "-gone"))
    finally:
        for s in servers:
            s.kill()
            s.wait()


def test_tenants_are_apart_and_the_node_ports_closed(net: PodNetwork) -> None:
    nlp1 = net.attach(_pod("n-1", "vc-nlp"))
    nlp2 = net.attach(_pod("n-2", "vc-nlp"))
    vision = net.attach(_pod("v-1", "vc-vision"))
    servers = [_serve(nlp2.netns, 8080), _serve(vision.netns, 8080), _serve(None, 18931)]
    try:
        for where, port in ((nlp2.netns, 8080), (vision.netns, 8080), (None, 18931)):
            _wait_listening(where, port)
        assert _connect(nlp1.netns, nlp2.ip, 8080) == "connected"
        assert _connect(nlp1.netns, vision.ip, 8080) != "connected"
        assert _connect(vision.netns, nlp2.ip, 8080) != "connected"
        # the node's port, on the bridge address, the pod's own loopback, or 127.0.0.1
        assert net.layout is not None
        assert _connect(nlp1.netns, net.layout.gateway, 18931) != "connected"
        assert _connect(nlp1.netns, "127.0.0.1", 18931) != "connected"
        # the node reaches pods (the agent's port-forward and probes)
        subprocess.run([sys.executable, "-c", "import socket; socket.create_connection("
                        f"('{vision.ip}', 8080), timeout=2)"], check=True, timeout=10)
    finally:
        for s in servers:
            s.kill()
            s.wait()


def _udp_from(netns: str, source: str, target: str, port: int) -> None:
    """Send one datagram from `source`, an address the pod does not have (IP_TRANSPARENT:
    what a process with CAP_NET_ADMIN in the pod could do; pods have no capabilities)."""
    done = _in_ns(netns, "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                  f"s.setsockopt(socket.SOL_IP, 19, 1)\ns.bind(('{source}', 0))\n"
                  f"s.sendto(b'from {source}', ('{target}', {port}))")
    assert done.returncode == 0, done.stderr


def test_a_pod_cannot_send_from_another_pods_address(net: PodNetwork) -> None:
    a = net.attach(_pod("s-a", "vc-nlp"))
    b = net.attach(_pod("s-b", "vc-nlp"))
    c = net.attach(_pod("s-c", "vc-nlp"))
    listener = subprocess.Popen(
        ["nsenter", f"--net={links.netns_path(c.netns)}", sys.executable, "-c",
         "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
         "s.bind(('0.0.0.0', 9999)); s.settimeout(3)\nwhile True:\n"
         "    try: print(s.recvfrom(100)[0].decode(), flush=True)\n"
         "    except OSError: break"], stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    _udp_from(a.netns, b.ip, c.ip, 9999)  # spoofed: dropped at a's veth
    _udp_from(a.netns, a.ip, c.ip, 9999)  # its own: delivered
    out, _ = listener.communicate(timeout=10)
    assert out.split() == ["from", a.ip]


def test_nothing_is_left_after_200_pods(net: PodNetwork) -> None:
    layout = net.layout
    assert layout is not None
    started = time.monotonic()
    live: list[str] = []
    for i in range(200):
        namespace = ("vc-nlp", "vc-vision", "team")[i % 3]
        att = net.attach(_pod(f"leak-{i}", namespace,
                              containers=[{"ports": [{"containerPort": 80,
                                                      "hostPort": 20000 + i}]}]))
        live.append(att.uid)
        if len(live) > 10:  # at most ~10 at a time, like pods that come and go
            net.detach(live.pop(0))
    assert len(links.namespaces(layout.netns_prefix)) == 10
    assert len(links.bridge_ports(layout)) == 10
    for uid in live:
        net.detach(uid)
    rules = firewall.listing(layout)
    assert links.namespaces(layout.netns_prefix) == []
    assert links.bridge_ports(layout) == []
    left = set(re.findall(r"10\.244\.231\.(\d+)\b(?!/)", rules)) - {"1"}  # the gateway
    assert left == set()
    assert "hostPort" not in rules and "dport 20" not in rules
    assert "dnat" not in rules.replace("ct status dnat", "")
    assert list(net.state_dir.glob("*.json")) == []
    assert time.monotonic() - started < 600  # bounded, not a speed check


def test_a_restart_keeps_live_pods_and_cleans_the_rest(tmp_path: Path) -> None:
    first = open_network(None, "isolated", CIDR, tmp_path, dns_port=0)
    first.start()
    kept = first.attach(_pod("r-keep", "team"))
    gone = first.attach(_pod("r-gone", "team"))
    first.stop()  # the agent dies: namespaces and rules stay
    assert gone.netns in links.namespaces(gone.netns)
    second = open_network(None, "isolated", CIDR, tmp_path, dns_port=0)
    try:
        second.start()
        removed = second.cleanup([kept.uid])
        assert removed == [gone.uid]
        again = second.attach(_pod("r-keep", "team"))
        assert again == kept
        assert links.namespaces(second.layout.netns_prefix) == [kept.netns]  # type: ignore[union-attr]
    finally:
        second.teardown()
        second.stop()


def _identify(netns: str, port: int, who: str) -> subprocess.Popen[bytes]:
    """A server in the pod that answers each connection with `who`."""
    return subprocess.Popen(
        ["nsenter", f"--net={links.netns_path(netns)}", sys.executable, "-c",
         "import socket\ns = socket.socket()\n"
         "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
         f"s.bind(('0.0.0.0', {port})); s.listen()\nwhile True:\n"
         f"    c, _ = s.accept(); c.sendall(b'{who}'); c.close()"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _answer(netns: str, ip: str, port: int) -> str:
    done = _in_ns(netns, "import socket\ntry:\n"
                  f"    c = socket.create_connection(('{ip}', {port}), timeout=2)\n"
                  "    print(c.recv(10).decode())\nexcept OSError as e:\n"
                  "    print(type(e).__name__)")
    return done.stdout.strip() or done.stderr


def test_a_service_address_is_translated_for_its_own_nodes_pods_only(tmp_path: Path) -> None:
    # two agents on one host, each with a Service at the same cluster IP: a pod reaches its
    # own node's endpoint, never the other node's (whichever table the kernel runs first)
    cidrs = {"A": "10.244.233.0/24", "B": "10.244.234.0/24"}
    networks = {who: open_network(None, "isolated", cidr, tmp_path / who, dns_port=0)
                for who, cidr in cidrs.items()}
    view = ServiceView("team", "web", "10.96.233.10", (PortSpec("http", 80, "tcp"),),
                       "namespace/team")
    servers: list[subprocess.Popen[bytes]] = []
    try:
        clients = {}
        for who, network in networks.items():
            network.start()
            clients[who] = network.attach(_pod(f"svc-{who}-client", "team"))
            backend = network.attach(_pod(f"svc-{who}-backend", "team"))
            servers.append(_identify(backend.netns, 8080, who))
            _wait_listening(backend.netns, 8080)
            endpoints = {view.key: [Endpoint(backend.ip, None, {"http": (8080, "tcp")})]}
            network._service_state = lambda e=endpoints: ([view], e)  # type: ignore[method-assign]
            network._apply()
        for who, client in clients.items():
            assert _answer(client.netns, "10.96.233.10", 80) == who
    finally:
        for server in servers:
            server.kill()
            server.wait()
        for network in networks.values():
            network.teardown()
            network.stop()


def test_one_cidr_is_one_agents(tmp_path: Path) -> None:
    first = open_network(None, "isolated", CIDR, tmp_path, dns_port=0)
    try:
        with pytest.raises(NetworkError, match="another agent"):
            open_network(None, "isolated", CIDR, tmp_path / "other", dns_port=0)
    finally:
        first.stop()
    with pytest.raises(NetworkError, match="--pod-cidr"):
        parse_cidr("10.244.0.0/33")


def test_tenant_pods_may_not_share_the_node_network(net: PodNetwork, tmp_path: Path) -> None:
    assert net.refusal(_pod("h", "vc-nlp", hostNetwork=True))[0] == "HostNetworkForbidden"  # type: ignore[index]
    assert net.refusal(_pod("h", "platform", hostNetwork=True)) is None
    host = open_network(None, "host", "auto", tmp_path / "h")
    assert not host.available
    assert host.refusal(_pod("t", "vc-nlp"))[0] == "NetworkUnavailable"  # type: ignore[index]
    assert host.refusal(_pod("p", "platform")) is None


def test_services_go_to_pod_endpoints_only() -> None:
    layout = Layout(ipaddress.IPv4Network(CIDR), "gpushare231")
    web = ServiceView("team", "web", "10.96.0.20", (PortSpec("http", 80, "tcp"),),
                      "namespace/team")
    api = ServiceView("default", "kubernetes", "10.96.0.1", (PortSpec("https", 443, "tcp"),),
                      "namespace/default")
    eps = {("team", "web"): [Endpoint("10.244.231.5", None, {"http": (8080, "tcp")}),
                             Endpoint("127.0.0.1", None, {"http": (6443, "tcp")})],
           ("default", "kubernetes"): [Endpoint("127.0.0.1", None, {"https": (6443, "tcp")})]}
    table = proxy_table([web, api], eps,
                        lambda ip: ipaddress.IPv4Address(ip) in layout.cidr)
    assert table[0].backends == (Backend("10.244.231.5", 8080),)  # not the node's port
    assert table[1].backends == (Backend("127.0.0.1", 6443),)  # the API, by its Service
    names = dns_names([web], eps, [PodName("team", "10.244.231.5", "w", None, "namespace/team")])
    assert names["web.team.svc.cluster.local."].addresses == ("10.96.0.20",)
    assert names["10-244-231-5.team.pod.cluster.local."].addresses == ("10.244.231.5",)
    text = firewall.render(firewall.Rules(layout, {}, (), table, ()))
    checked = subprocess.run(["nft", "-c", "-f", "-"], input=text, capture_output=True,
                             text=True, check=False)
    assert checked.returncode == 0, checked.stderr


def test_where_the_node_cannot_isolate_it_says_why_and_never_falls_back_silently(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(firewall, "nft_binary", lambda: None)
    unavailable = open_network(None, "auto", CIDR, tmp_path)
    assert not unavailable.available and "nftables (nft) is not installed" in unavailable.reason
    condition = unavailable.condition("t", "t")
    assert condition["type"] == "PodNetworkIsolated" and condition["status"] == "False"
    assert "tenants' pods are refused" in condition["message"]
    with pytest.raises(NetworkError, match="--pod-network isolated: nftables"):
        open_network(None, "isolated", CIDR, tmp_path)
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    not_root = open_network(None, "auto", CIDR, tmp_path)
    assert not not_root.available and "not root" in not_root.reason
    with pytest.raises(NetworkError, match="--pod-network: 'flat'"):
        open_network(None, "flat", CIDR, tmp_path)


def test_headless_services_name_their_ready_pods_and_hostnames() -> None:
    db = ServiceView("team", "db", None, (PortSpec("pg", 5432, "tcp"),), "namespace/team")
    eps = {("team", "db"): [Endpoint("10.244.231.7", "db-0", {"pg": (5432, "tcp")}),
                            Endpoint("10.244.231.8", None, {"pg": (5432, "tcp")})]}
    pods = [PodName("team", "10.244.231.9", "worker", "db", "namespace/team"),
            PodName("team", "10.244.231.10", "lonely", "nothing", "namespace/team")]
    names = dns_names([db], eps, pods)
    assert names["db.team.svc.cluster.local."].addresses == ("10.244.231.7", "10.244.231.8")
    assert names["db-0.db.team.svc.cluster.local."].addresses == ("10.244.231.7",)
    assert names["worker.db.team.svc.cluster.local."].addresses == ("10.244.231.9",)
    assert "lonely.nothing.team.svc.cluster.local." not in names  # no such headless Service
    assert proxy_table([db], eps, lambda ip: True) == []  # no ClusterIP to DNAT
