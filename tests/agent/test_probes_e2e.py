"""Probes with a real `gpushare agent` process and the endpoints controller: a failing
readiness probe takes the pod out of its Service's EndpointSlice, a failing liveness probe
restarts the container, a gRPC health check, `Unhealthy` events in the kubelet's words. The
agent gives each pod a network namespace of its own here (root, nftables): its probes
reach the pod at its podIP, and only a hostNetwork pod on the node's loopback."""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_agent_e2e import NS, wait_for
from test_pod_limits_e2e import LimitsCluster

from gpushare.agent.runtime.probes import pod_address, probes_of
from gpushare.controllers.workloads.endpoints import EndpointsController
from gpushare.kube.client import ENDPOINTSLICES, EVENTS, PODS, SERVICES, Stopper
from gpushare.kube.informers import InformerFactory

GRPC_SERVER = """
import sys, time
from concurrent import futures
import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
servicer = health.HealthServicer()
servicer.set("", health_pb2.HealthCheckResponse.SERVING)
servicer.set("sick", health_pb2.HealthCheckResponse.NOT_SERVING)
health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
server.add_insecure_port("0.0.0.0:" + sys.argv[1])
server.start()
print("serving", flush=True)
time.sleep(300)
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LimitsCluster]:
    c = LimitsCluster(tmp_path_factory.mktemp("probes-e2e"))
    c.node = "probes-node"
    c.start_agent_with()
    stopper = Stopper()
    informers = InformerFactory(c.kube, stopper)
    controller = EndpointsController(c.kube, informers, stopper)
    informers.start()
    controller.start()
    yield c
    stopper.stop()
    informers.stop()
    if c.agent is not None:
        c.kill_agent(signal.SIGTERM)
    c.server.stop()


def _pod(name: str, command: list[str], probes: dict[str, Any], labels: dict[str, str],
         restart: str = "Always", ports: list[dict[str, Any]] | None = None,
         **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "busybox", "command": command,
                                 **probes}
    if ports:
        container["ports"] = ports
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": labels},
            "spec": {"nodeName": "probes-node", "restartPolicy": restart,
                     "terminationGracePeriodSeconds": 1, "containers": [container],
                     **spec}}


def _ready(cluster: LimitsCluster, name: str) -> bool:
    pod = cluster.pod(name) or {}
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _slice_ready(cluster: LimitsCluster, service: str) -> list[bool]:
    items = cluster.kube.list(ENDPOINTSLICES.collection(NS),
                              labelSelector=f"kubernetes.io/service-name={service}")["items"]
    return [bool(e.get("conditions", {}).get("ready")) for s in items
            for e in s.get("endpoints") or []]


def _events(cluster: LimitsCluster, pod: str, reason: str) -> list[str]:
    return [e["message"] for e in cluster.kube.list(EVENTS.collection(NS))["items"]
            if e["reason"] == reason and e["involvedObject"]["name"] == pod]


def test_readiness_moves_the_pod_in_and_out_of_its_endpoint_slice(
        cluster: LimitsCluster) -> None:
    cluster.kube.create(SERVICES.collection(NS), {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}})
    probe = {"readinessProbe": {"exec": {"command": ["cat", "ready"]}, "periodSeconds": 1,
                                "failureThreshold": 1}}
    cluster.kube.create(PODS_COLLECTION, _pod("web", ["sleep", "300"], probe, {"app": "web"}))
    cluster.wait_phase("web", "Running", timeout=30)
    wait_for(lambda: _events(cluster, "web", "Unhealthy"), 20)
    assert not _ready(cluster, "web")
    assert any(m.startswith("Readiness probe failed: cat: ") for m in
               _events(cluster, "web", "Unhealthy"))
    directory = cluster.root / "agent" / "pods" / NS / "web"
    (directory / "ready").write_text("yes\n")
    wait_for(lambda: _ready(cluster, "web"), 20)
    wait_for(lambda: _slice_ready(cluster, "web") == [True], 20)
    (directory / "ready").unlink()
    wait_for(lambda: not _ready(cluster, "web"), 20)
    wait_for(lambda: _slice_ready(cluster, "web") in ([], [False]), 20)
    status = cluster.pod("web")["status"]["containerStatuses"][0]
    assert status["ready"] is False and status["restartCount"] == 0  # not restarted


def test_a_failing_liveness_probe_restarts_the_container(cluster: LimitsCluster) -> None:
    probe = {"livenessProbe": {"httpGet": {"path": "/healthz", "port": 1},
                               "periodSeconds": 1, "failureThreshold": 2}}
    cluster.kube.create(PODS_COLLECTION, _pod("sick", ["sleep", "300"], probe, {}))
    wait_for(lambda: (p := cluster.pod("sick")) and any(
        c["restartCount"] >= 1 for c in p["status"].get("containerStatuses") or []), 40)
    unhealthy = _events(cluster, "sick", "Unhealthy")
    ip = cluster.pod("sick")["status"]["podIP"]
    assert ip != "127.0.0.1"
    assert any(m.startswith(f'Liveness probe failed: Get "http://{ip}:1/healthz": '
                            f"dial tcp {ip}:1: ") for m in unhealthy), unhealthy
    assert "Container main failed liveness probe, will be restarted" in _events(
        cluster, "sick", "Killing")


def test_grpc_and_tcp_probes(cluster: LimitsCluster, tmp_path: Path) -> None:
    port = 18000 + (hash(str(tmp_path)) % 1000)
    probes = {"readinessProbe": {"grpc": {"port": port}, "periodSeconds": 1},
              "startupProbe": {"tcpSocket": {"port": "grpc"}, "periodSeconds": 1,
                               "failureThreshold": 30}}
    cluster.kube.create(PODS_COLLECTION, _pod(
        "rpc", [sys.executable, "-c", GRPC_SERVER, str(port)], probes, {},
        ports=[{"name": "grpc", "containerPort": port}]))
    wait_for(lambda: _ready(cluster, "rpc"), 40)
    # the same server asked for a service it reports NOT_SERVING: never ready
    sick = {"readinessProbe": {"grpc": {"port": port + 1, "service": "sick"},
                               "periodSeconds": 1}}
    cluster.kube.create(PODS_COLLECTION, _pod(
        "rpc-sick", [sys.executable, "-c", GRPC_SERVER, str(port + 1)], sick, {}))
    wait_for(lambda: 'Readiness probe failed: service unhealthy (responded with "NOT_SERVING")'
             in _events(cluster, "rpc-sick", "Unhealthy"), 40)
    assert not _ready(cluster, "rpc-sick")


HTTP_SERVER = """
import http.server, sys
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/healthz" else 404)
        self.end_headers()
        self.wfile.write(b"ok")
http.server.ThreadingHTTPServer(("0.0.0.0", int(sys.argv[1])), Health).serve_forever()
"""


def _free_on_loopback() -> int:
    """A port nothing of the node listens on at its loopback address (so a probe that went
    there instead of to the pod would fail), below the ephemeral range (no client socket of
    the node takes it meanwhile)."""
    for port in range(21000 + os.getpid() % 4000, 32000):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port on the loopback address")


def test_an_http_readiness_probe_reaches_the_server_at_the_pods_own_ip(
        cluster: LimitsCluster) -> None:
    port = _free_on_loopback()
    probe = {"readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"},
                                "periodSeconds": 1}}
    cluster.kube.create(PODS_COLLECTION, _pod(
        "web-own-ip", [sys.executable, "-c", HTTP_SERVER, str(port)], probe, {},
        ports=[{"name": "http", "containerPort": port}]))
    wait_for(lambda: _ready(cluster, "web-own-ip"), 40)
    status = cluster.pod("web-own-ip")["status"]
    pod_cidr = (cluster.kube.get(f"/api/v1/nodes/{cluster.node}") or {})["spec"]["podCIDR"]
    assert ipaddress.ip_address(status["podIP"]) in ipaddress.ip_network(pod_cidr)
    # the server listens in the pod's own network namespace, not on the node's
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0
    # any failure before the server was up was a dial of the pod's address
    for message in _events(cluster, "web-own-ip", "Unhealthy"):
        assert f"http://{status['podIP']}:{port}/healthz" in message, message


def test_a_host_network_pods_probe_goes_to_the_nodes_loopback(cluster: LimitsCluster) -> None:
    port = _free_on_loopback()
    probe = {"readinessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 1}}
    cluster.kube.create(PODS_COLLECTION, _pod(
        "on-host", [sys.executable, "-c", HTTP_SERVER.replace('"0.0.0.0"', '"127.0.0.1"'),
                    str(port)], probe, {}, hostNetwork=True))
    wait_for(lambda: _ready(cluster, "on-host"), 40)
    with socket.socket() as s:  # on the node's own loopback this time
        assert s.connect_ex(("127.0.0.1", port)) == 0, cluster.pod("on-host")["status"]


def test_a_container_with_a_readiness_probe_is_never_ready_before_its_first_success(
        cluster: LimitsCluster) -> None:
    """Every version of the pod the API server kept, from its creation on: Running, yet not
    once Ready (its readiness probe never succeeds); Ready only ever follows a success."""
    since = cluster.kube.list(PODS_COLLECTION)["metadata"]["resourceVersion"]
    probe = {"readinessProbe": {"exec": {"command": ["false"]}, "periodSeconds": 1}}
    cluster.kube.create(PODS_COLLECTION, _pod("never-ready", ["sleep", "300"], probe, {}))
    cluster.wait_phase("never-ready", "Running", timeout=30)
    wait_for(lambda: _events(cluster, "never-ready", "Unhealthy"), 20)
    seen = [e["object"] for e in cluster.kube.watch(
        PODS_COLLECTION, since, timeout_seconds=2, field_selector="metadata.name=never-ready")
        if e["type"] in ("ADDED", "MODIFIED")]
    statuses = [o.get("status") or {} for o in seen]
    assert any(s.get("phase") == "Running" for s in statuses)
    for status in statuses:
        assert not any(c["type"] in ("Ready", "ContainersReady") and c["status"] == "True"
                       for c in status.get("conditions") or []), status
        assert not any(c.get("ready") for c in status.get("containerStatuses") or []), status


def test_pod_address_is_the_pod_ip_unless_the_pod_is_on_the_nodes_network() -> None:
    pod: dict[str, Any] = {"spec": {}}
    assert pod_address(pod, "10.244.7.9") == "10.244.7.9"
    assert pod_address(pod, None) == "127.0.0.1"  # the node cannot isolate: shared network
    assert pod_address({"spec": {"hostNetwork": True}}, "10.244.7.9") == "127.0.0.1"


def test_probe_fields_are_checked() -> None:
    with pytest.raises(ValueError, match=r"spec.containers\[0\].livenessProbe.successThreshold"):
        probes_of({"livenessProbe": {"tcpSocket": {"port": 1}, "successThreshold": 2}},
                  "spec.containers[0]")
    with pytest.raises(ValueError, match="neither a port number nor a named container port"):
        probes_of({"readinessProbe": {"httpGet": {"port": "web"}}}, "spec.containers[0]")
    [probe] = probes_of({"readinessProbe": {"httpGet": {"port": "web"}},
                         "ports": [{"name": "web", "containerPort": 8080}]}, "c")
    assert probe.action["port"] == 8080 and probe.period == 10 and probe.failure_threshold == 3


PODS_COLLECTION = PODS.collection(NS)
