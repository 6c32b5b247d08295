"""A malformed pod inside a tenant cluster (written straight into the store, as one stored
before validation would be) is not synced to the host — not even with what cannot be read
dropped — and is told why with a Warning Event naming the field; the tenant's other pods
reach the host as usual."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tenancy_support import wait_for

from gpushare.cli.compose import api_server
from gpushare.controller_manager import start_controllers
from gpushare.kube.client import EVENTS, PODS, KubeClient
from gpushare.tenancy.controller import VIRTUALCLUSTERS, tenant_client
from store_edit import store_put

HOST_NS = "vc-nlp"
MAIN = {"name": "c", "image": "python", "command": ["python3", "-c", "pass"]}


def _pod(name: str, spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}",
                         "creationTimestamp": "2026-01-01T00:00:00Z",
                         "annotations": {"gpu-fraction": "0.1"}, **meta},
            "spec": {"schedulerName": "gpushare", **spec}}


FIELDS = {"a-containers-string": "spec.containers", "a-init-string": "spec.initContainers",
          "a-annotations-string": "metadata.annotations", "a-volumes-string": "spec.volumes"}
POISON = [
    _pod("a-containers-string", {"containers": "x"}),
    _pod("a-init-string", {"initContainers": "x", "containers": [MAIN]}),
    _pod("a-annotations-string", {"containers": [MAIN]}, annotations="x"),
    _pod("a-volumes-string", {"containers": [MAIN], "volumes": "x"}),
]


def _synced(host: KubeClient) -> set[str]:
    items = host.list(PODS.collection(HOST_NS)).get("items") or []
    return {p["metadata"]["annotations"]["tenancy.gpushare.io/object"] for p in items}


def test_a_malformed_tenant_pod_is_not_synced_and_holds_nothing_up(tmp_path: Path) -> None:
    server = api_server(tmp_path / "data").start()
    kubeconfig = str(tmp_path / "data" / "admin.kubeconfig")
    host = KubeClient.from_kubeconfig(kubeconfig)
    running = start_controllers(kubeconfig, enabled=("tenancy",))
    try:
        host.create(VIRTUALCLUSTERS.collection(), {
            "apiVersion": "tenancy.gpushare.io/v1alpha1", "kind": "VirtualCluster",
            "metadata": {"name": "nlp"}, "spec": {"queues": ["nlp"]}})
        wait_for(lambda: (host.get(VIRTUALCLUSTERS.item("nlp")) or {}).get("status", {})
                 .get("phase") in ("Ready", "Pending"), 30, "nlp provisioned")
        tenant = tenant_client(kubeconfig, "nlp")
        tenant.create(PODS.collection("default"), _pod("before", {"containers": [MAIN]}))
        wait_for(lambda: _synced(host) == {"default/before"}, 30, "the first pod synced")
        for pod in POISON:
            store_put(server, "pods", pod, cluster="nlp")
        good = _pod("after", {"containers": [MAIN]})
        for key in ("uid", "creationTimestamp"):
            good["metadata"].pop(key)
        tenant.create(PODS.collection("default"), good)
        wait_for(lambda: _synced(host) == {"default/before", "default/after"}, 30,
                 "the pod created after the malformed ones synced")
        # Each malformed one is told why, once, naming the field, and never reaches the host
        # (not even with what could not be read dropped).
        for pod in POISON:
            name = pod["metadata"]["name"]
            told = wait_for(lambda name=name: [
                e for e in tenant.list(EVENTS.collection("default"))["items"]
                if e["involvedObject"]["name"] == name and e.get("reason") == "FailedSync"],
                30, f"{name} told why")
            assert FIELDS[name] in told[0]["message"], told[0]
        assert _synced(host) == {"default/before", "default/after"}
        tenant.close()
    finally:
        running.stop()
        host.close()
        server.stop()
