"""Attacks on the pod network, end to end (see `podnet_support`): a tenant's pod tries
another tenant's server, the other tenant's Service names, the API server's host port (on
the node's loopback and on the bridge address), binding a port in the node's namespace, and
asking for the node's network outright."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpushare.kube.client import NAMESPACES, NODES, PODS
from podnet_support import CONNECT, NODE, PY, RESOLVE, SERVE, SLEEP, Net, serving, wait_for

CIDR = "10.244.234.0/24"

BIND = ("import socket\ns = socket.socket()\ns.setsockopt(socket.SOL_SOCKET, "
        "socket.SO_REUSEADDR, 1)\ns.bind(('0.0.0.0', {port}))\ns.listen()\n"
        "print('bound', flush=True)")


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    cluster = Net(tmp_path_factory.mktemp("pod-network-attacks"), CIDR)
    yield cluster
    cluster.stop()


def test_a_pod_cannot_reach_another_tenant_or_the_api_servers_port(net: Net) -> None:
    net.pod("vc-vision", "vision-web", SERVE)
    other = net.running("vc-vision", "vision-web")["status"]["podIP"]
    wait_for(lambda: serving(other), 30, "the other tenant's server")
    net.pod("vc-nlp", "probe", SLEEP)
    net.running("vc-nlp", "probe")
    assert net.in_pod("vc-nlp", "probe", CONNECT.format(host=other, port=8080)) != "connected"
    # vision's pods do not even learn nlp's Service names
    net.pod("vc-vision", "vision-client", SLEEP)
    net.running("vc-vision", "vision-client")
    assert net.in_pod("vc-vision", "vision-client", RESOLVE.format(
        name="web.vc-nlp.svc.cluster.local")) == "gaierror"
    api_port = net.server.port
    for host in ("127.0.0.1", net.gateway):
        assert net.in_pod("vc-nlp", "probe", CONNECT.format(host=host, port=api_port)) != \
            "connected"
    # ...but the API server by its Service, as KUBERNETES_SERVICE_HOST/PORT say
    env = json.loads(net.in_pod("vc-nlp", "probe", "import os, json; print(json.dumps("
                                "{k: v for k, v in os.environ.items() if k.startswith("
                                "'KUBERNETES_')}))"))
    assert env["KUBERNETES_SERVICE_HOST"] == "10.96.0.1"
    assert env["KUBERNETES_SERVICE_PORT"] == "443"
    assert net.in_pod("vc-nlp", "probe", CONNECT.format(host="10.96.0.1", port=443)) == \
        "connected"


def test_a_tenant_pod_asking_for_the_host_network_is_refused(net: Net) -> None:
    net.pod("vc-nlp", "sneaky", SERVE, hostNetwork=True)
    pod = wait_for(lambda: (p := net.kube.get(PODS.item("sneaky", "vc-nlp"))) and
                   (p.get("status") or {}).get("phase") == "Failed" and p, 30, "refused")
    assert pod["status"]["reason"] == "HostNetworkForbidden"
    assert "spec.hostNetwork" in pod["status"]["message"]


def test_a_pod_cannot_take_a_port_of_the_node(net: Net) -> None:
    """The API server's port while it restarts is free on the node: a pod binding "it"
    binds its own namespace's port; the node's stays free for the API server."""
    with socket.socket() as probe:
        probe.bind(("0.0.0.0", 0))
        free = probe.getsockname()[1]
    net.pod("vc-nlp", "squatter", [PY, "-c", BIND.format(port=free) +
                                   "\nimport time; time.sleep(100000)"])
    net.running("vc-nlp", "squatter")
    assert net.in_pod("vc-nlp", "squatter", BIND.format(port=free + 1)) == "bound"
    wait_for(lambda: "bound" in net.kubectl("logs", "-n", "vc-nlp", "squatter").stdout, 30,
             "the squatter bound")
    with socket.socket() as node_side:  # the node's port is still free to take
        node_side.bind(("0.0.0.0", free))


def test_on_a_node_without_isolation_tenants_pods_are_refused_not_run_on_its_network(
        tmp_path: Path) -> None:
    cluster = Net(tmp_path, "10.244.235.0/24", mode="host")
    try:
        node = cluster.kube.get(NODES.item(NODE)) or {}
        condition = next(c for c in node["status"]["conditions"]
                         if c["type"] == "PodNetworkIsolated")
        assert condition["status"] == "False"
        assert "tenants' pods are refused" in condition["message"]
        cluster.pod("vc-nlp", "tenant-pod", SERVE)
        pod = wait_for(lambda: (p := cluster.kube.get(PODS.item("tenant-pod", "vc-nlp")))
                       and (p.get("status") or {}).get("phase") == "Failed" and p, 30,
                       "refused")
        assert pod["status"]["reason"] == "NetworkUnavailable"
        assert not pod["status"].get("containerStatuses")  # never started
        # the platform's own pods run there, as the Node says
        cluster.kube.create(NAMESPACES.collection(), {"metadata": {"name": "platform"}})
        cluster.pod("platform", "platform-pod", SLEEP)
        running = cluster.running("platform", "platform-pod")
        assert running["status"]["podIP"] == "127.0.0.1"
    finally:
        cluster.stop()
