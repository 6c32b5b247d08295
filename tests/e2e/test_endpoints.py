"""Endpoints and EndpointSlices: the `kubernetes` Service's name the API itself, and a
Service with a selector gets both from its pods (endpoints-controller), as Kubernetes'
EndpointSlice conformance tests expect; both go with the Service."""

from __future__ import annotations

from e2e_support import wait_for

from gpushare.kube.client import PODS

SERVICE = """
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http}]
"""

POD = """
apiVersion: v1
kind: Pod
metadata:
  name: web-1
  namespace: default
  labels: {app: web, kai.scheduler/queue: default-queue}
spec:
  containers:
  - name: main
    image: busybox
    ports: [{name: http, containerPort: 8080}]
"""


def _slice(kubectl):
    items = kubectl.json("get", "endpointslices", "-l",
                         "kubernetes.io/service-name=web")["items"]
    return items[0] if len(items) == 1 else None


def test_the_api_and_selector_services_have_endpoints_and_slices(server, controllers,
                                                                  kubectl, client):
    api = kubectl.json("get", "endpoints", "kubernetes")
    assert api["subsets"][0]["addresses"] == [{"ip": "127.0.0.1"}]
    assert api["subsets"][0]["ports"][0]["port"] == server.port
    api_slice = kubectl.json("get", "endpointslice", "kubernetes")
    assert api_slice["endpoints"][0]["addresses"] == ["127.0.0.1"]
    assert len(api_slice["ports"]) == len(api["subsets"][0]["ports"])

    kubectl.run("apply", "-f", "-", stdin=SERVICE)
    empty = wait_for(lambda: _slice(kubectl), what="the Service's EndpointSlice")
    assert empty["endpoints"] in (None, []) and empty["addressType"] == "IPv4"
    assert empty["metadata"]["ownerReferences"][0]["kind"] == "Service"
    assert not kubectl.json("get", "endpoints", "web").get("subsets")

    # The node's part, played here: the pod gets an IP and becomes Ready.
    kubectl.run("apply", "-f", "-", stdin=POD)
    client.merge_patch(PODS.item("web-1", "default", "status"), {"status": {
        "phase": "Running", "podIP": "10.1.2.3",
        "conditions": [{"type": "Ready", "status": "True"}]}})
    subsets = wait_for(lambda: kubectl.json("get", "endpoints", "web").get("subsets"),
                       what="the pod in the Endpoints")
    assert subsets[0]["addresses"][0]["ip"] == "10.1.2.3"
    assert subsets[0]["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    slice_ = wait_for(lambda: (_slice(kubectl) or {}).get("endpoints"), what="slice endpoint")
    assert slice_[0]["addresses"] == ["10.1.2.3"] and slice_[0]["conditions"]["ready"]

    kubectl.run("delete", "service", "web")
    wait_for(lambda: kubectl.run("get", "endpoints", "web", check=False).returncode != 0
             and _slice(kubectl) is None, what="Endpoints and slice gone with the Service")
