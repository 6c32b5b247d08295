"""The pod network end to end (see `podnet_support`): two replicas on one port, each on
its own address; a pod reaches its tenant's pods by address and by Service name; kubectl
port-forward reaches a pod's own localhost; nothing is left once the pods are gone."""

from __future__ import annotations

import os
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from gpushare.kube.client import PODS, SERVICES
from podnet_support import (
    CONNECT,
    FETCH,
    KUBECTL,
    NODE,
    PY,
    RESOLVE,
    SERVE,
    SLEEP,
    Net,
    serving,
    wait_for,
)

CIDR = "10.244.233.0/24"


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    cluster = Net(tmp_path_factory.mktemp("pod-network"), CIDR)
    yield cluster
    cluster.stop()


def test_two_replicas_on_8080_each_ready_on_its_own_ip(net: Net) -> None:
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "vc-nlp"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                     "nodeName": NODE, "terminationGracePeriodSeconds": 2,
                     "containers": [{"name": "web", "image": "busybox", "command": SERVE,
                                     "ports": [{"name": "http", "containerPort": 8080}]}]}}}}
    net.kube.create("/apis/apps/v1/namespaces/vc-nlp/deployments", deployment)

    def ready_pods() -> list[dict[str, Any]] | None:
        pods = net.kube.list(PODS.collection("vc-nlp"), labelSelector="app=web")["items"]
        ready = [p for p in pods if any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (p.get("status") or {}).get("conditions") or [])
            and (p.get("status") or {}).get("podIP")]
        return ready if len(ready) == 2 else None

    pods = wait_for(ready_pods, 90, "two Ready replicas")
    ips = [p["status"]["podIP"] for p in pods]
    assert len(set(ips)) == 2 and all(ip.startswith("10.244.233.") for ip in ips)
    assert all(p["status"]["podIPs"] == [{"ip": p["status"]["podIP"]}] for p in pods)
    # both listen on 8080, neither crashed with "Address already in use"
    wait_for(lambda: all(serving(ip) for ip in ips), 30, "both replicas serving")
    assert all(p["status"]["containerStatuses"][0]["restartCount"] == 0 for p in pods)


def test_a_pod_reaches_its_tenant_by_ip_and_service_name(net: Net) -> None:
    net.kube.create(SERVICES.collection("vc-nlp"), {
        "metadata": {"name": "web", "namespace": "vc-nlp"},
        "spec": {"selector": {"app": "web"},
                 "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}})
    net.pod("vc-nlp", "client", SLEEP)
    web = wait_for(lambda: net.kube.list(PODS.collection("vc-nlp"),
                                         labelSelector="app=web")["items"], 60, "web pods")
    net.running("vc-nlp", "client")
    target = web[0]["status"]["podIP"]
    wait_for(lambda: serving(target), 30, "web serving")
    assert net.in_pod("vc-nlp", "client", CONNECT.format(host=target, port=8080)) == \
        "connected"
    cluster_ip = net.kube.get(SERVICES.item("web", "vc-nlp"))["spec"]["clusterIP"]
    resolved = wait_for(lambda: (out := net.in_pod("vc-nlp", "client", RESOLVE.format(
        name="web.vc-nlp.svc.cluster.local"))) == cluster_ip and out, 30, "the Service name")
    assert resolved == cluster_ip
    # the short name through the search path, and the ClusterIP to a ready endpoint
    assert net.in_pod("vc-nlp", "client", RESOLVE.format(name="web")) == cluster_ip
    status = wait_for(lambda: net.in_pod("vc-nlp", "client", FETCH.format(url="http://web/"))
                      == "200", 30, "the Service answering")
    assert status
    resolv = net.in_pod("vc-nlp", "client", "print(open('/etc/resolv.conf').read())")
    assert "search vc-nlp.svc.cluster.local svc.cluster.local cluster.local" in resolv
    assert "options ndots:5" in resolv


def test_the_downward_api_gives_the_pods_own_address(net: Net) -> None:
    body = {"metadata": {"name": "downward", "namespace": "vc-nlp"},
            "spec": {"nodeName": NODE, "restartPolicy": "Never",
                     "terminationGracePeriodSeconds": 2,
                     "containers": [{"name": "main", "image": "busybox", "command": SLEEP,
                                     "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {
                                         "fieldPath": "status.podIP"}}}]}]}}
    net.kube.create(PODS.collection("vc-nlp"), body)
    pod = net.running("vc-nlp", "downward")
    assert net.in_pod("vc-nlp", "downward", "import os; print(os.environ['POD_IP'])") == \
        pod["status"]["podIP"]


def test_port_forward_reaches_the_pods_own_localhost(net: Net) -> None:
    net.pod("vc-nlp", "local-only", [PY, "-m", "http.server", "8080", "--bind", "127.0.0.1"])
    net.running("vc-nlp", "local-only")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        local = s.getsockname()[1]
    env = dict(os.environ, KUBECONFIG=str(net.kubeconfig))
    forward = subprocess.Popen([KUBECTL, "port-forward", "-n", "vc-nlp", "pod/local-only",
                                f"{local}:8080"], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    try:
        status = wait_for(lambda: _fetch_local(local), 30, "port-forward answering")
        assert status == 200
    finally:
        forward.terminate()
        forward.wait(10)


def _fetch_local(port: int) -> int | None:
    try:
        return int(urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2).status)
    except OSError:
        return None


def test_a_host_port_reaches_its_pod(net: Net) -> None:
    with socket.socket() as probe:
        probe.bind(("0.0.0.0", 0))
        free = probe.getsockname()[1]
    body = {"metadata": {"name": "published", "namespace": "vc-nlp"},
            "spec": {"nodeName": NODE, "restartPolicy": "Never",
                     "terminationGracePeriodSeconds": 2,
                     "containers": [{"name": "main", "image": "busybox", "command": SERVE,
                                     "ports": [{"containerPort": 8080, "hostPort": free}]}]}}
    net.kube.create(PODS.collection("vc-nlp"), body)
    net.running("vc-nlp", "published")
    assert wait_for(lambda: _fetch_local(free), 30, "the hostPort answering") == 200


def test_no_namespace_or_veth_left_after_the_pods_go(net: Net) -> None:
    net.kube.delete("/apis/apps/v1/namespaces/vc-nlp/deployments/web")
    for namespace in ("vc-nlp", "vc-vision"):
        for pod in net.kube.list(PODS.collection(namespace))["items"]:
            net.kube.delete(PODS.item(pod["metadata"]["name"], namespace))
    wait_for(lambda: not any(net.kube.list(PODS.collection(ns))["items"]
                             for ns in ("vc-nlp", "vc-vision")), 60, "pods gone")

    def leftovers() -> list[str]:
        names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                               check=True).stdout
        ours = [n for n in names.split() if n.startswith(f"{net.bridge}-")]
        ports = subprocess.run(["ip", "-o", "link", "show", "master", net.bridge],
                               capture_output=True, text=True, check=False).stdout
        return ours + [line for line in ports.splitlines() if line.strip()]

    wait_for(lambda: not leftovers(), 30, "namespaces and veths removed")
