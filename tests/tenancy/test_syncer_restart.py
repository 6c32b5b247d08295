"""The syncer resumes from both sides after a restart: nothing lost, nothing twice."""

from __future__ import annotations

from pathlib import Path

from tenancy_support import wait_for

from gpushare.cli.compose import api_server
from gpushare.controller_manager import start_controllers
from gpushare.kube.client import PODS, KubeClient
from gpushare.tenancy.controller import VIRTUALCLUSTERS, tenant_client

HOST_NS = "vc-nlp"


def _pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default",
                         "annotations": {"gpu-fraction": "0.1"}},
            "spec": {"schedulerName": "gpushare",
                     "containers": [{"name": "c", "image": "python",
                                     "command": ["python3", "-c", "pass"]}]}}


def _host_pods(host: KubeClient) -> dict[str, dict]:
    items = host.list(PODS.collection(HOST_NS)).get("items") or []
    return {p["metadata"]["annotations"]["tenancy.gpushare.io/object"]: p for p in items}


def test_syncer_restart_loses_and_duplicates_nothing(tmp_path: Path):
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
        for name in ("keep", "deleted-in-tenant", "deleted-on-host"):
            tenant.create(PODS.collection("default"), _pod(name))
        wait_for(lambda: len(_host_pods(host)) == 3, 30, "three host pods")
        before = _host_pods(host)

        running.stop()  # the syncer is down while both sides change
        tenant.delete(PODS.item("deleted-in-tenant", "default"))
        host.delete(PODS.item(before["default/deleted-on-host"]["metadata"]["name"], HOST_NS))
        tenant.create(PODS.collection("default"), _pod("made-while-down"))

        running = start_controllers(kubeconfig, enabled=("tenancy",))
        wait_for(lambda: set(_host_pods(host)) == {"default/keep", "default/made-while-down"},
                 30, "the host side caught up")
        wait_for(lambda: {p["metadata"]["name"] for p in
                          tenant.list(PODS.collection("default"))["items"]}
                 == {"keep", "made-while-down"}, 30, "the tenant side caught up")
        after = _host_pods(host)
        # The untouched pod's host copy is the same object: not re-created.
        assert after["default/keep"]["metadata"]["uid"] == \
            before["default/keep"]["metadata"]["uid"]
        # Nothing twice: one host pod per tenant pod, and it names the tenant pod's uid.
        tenant_pods = {p["metadata"]["name"]: p for p in
                       tenant.list(PODS.collection("default"))["items"]}
        assert len(host.list(PODS.collection(HOST_NS))["items"]) == 2
        for key, pod in after.items():
            name = key.split("/", 1)[1]
            assert pod["metadata"]["annotations"]["tenancy.gpushare.io/uid"] == \
                tenant_pods[name]["metadata"]["uid"]
            assert tenant_pods[name]["metadata"]["annotations"][
                "tenancy.gpushare.io/host-uid"] == pod["metadata"]["uid"]
        tenant.close()
    finally:
        running.stop()
        host.close()
        server.stop()


