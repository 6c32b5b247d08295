"""GPU fractions on kubelet nodes, end to end: gpushare's webhook (real HTTPS) registered in a
MutatingWebhookConfiguration, a fractional pod created plain → its spec carries the envFrom
and the MPS volume; the scheduler with ``gpu_share_configmaps`` on binds it → its ConfigMap of
GPU and MPS limits, owned by the pod, was written before the bind. Whole-GPU pods get none.
Real API server, real controllers."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from api_cluster import gpu_pod, node_cluster
from gpushare.controller_manager import start_controllers
from gpushare.kube.client import CONFIGMAPS, EVENTS, PODS, KubeClient
from gpushare.webhook.server import WebhookServer, self_signed
from waiting import wait_for

QUEUE = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "team"},
         "spec": {"resources": {"gpu": {"quota": 2, "limit": -1, "overQuotaWeight": 1}}}}


def _webhook_configuration(port: int, ca: bytes) -> dict[str, Any]:
    return {"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration", "metadata": {"name": "gpushare"},
            "webhooks": [{"name": "gpu-fractions.gpushare.io", "admissionReviewVersions": ["v1"],
                          "sideEffects": "None", "failurePolicy": "Fail",
                          "clientConfig": {"url": f"https://localhost:{port}/mutate-pods",
                                           "caBundle": base64.b64encode(ca).decode()},
                          "rules": [{"operations": ["CREATE"], "apiGroups": [""],
                                     "apiVersions": ["v1"], "resources": ["pods"]}]}]}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[KubeClient, str]]:
    cert, key = self_signed(tmp_path / "webhook", ["localhost"])
    webhook = WebhookServer("127.0.0.1", 0, cert, key)
    webhook.start()
    try:
        with node_cluster(tmp_path, "2xH100", QUEUE) as (client, kubeconfig):
            client.create("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
                          _webhook_configuration(webhook.port, cert.read_bytes()))
            yield client, kubeconfig
    finally:
        webhook.stop()


def _bound(client: KubeClient, name: str) -> dict[str, Any] | None:
    pod = client.get(PODS.item(name, "default")) or {}
    return pod if (pod.get("spec") or {}).get("nodeName") else None


def test_fractional_pod_configmap_written_before_bind(
        cluster: tuple[KubeClient, str]) -> None:
    client, kubeconfig = cluster
    running = start_controllers(kubeconfig, enabled=("pod-grouper", "scheduler"),
                                metrics_push_interval=None, gpu_share_configmaps=True)
    try:
        created = client.create(PODS.collection("default"), gpu_pod("frac", "0.5"))
        assert created["spec"]["containers"][0]["envFrom"] == [
            {"configMapRef": {"name": "frac-gpu-share", "optional": False}}]
        assert any(v["name"] == "gpushare-mps" for v in created["spec"]["volumes"])
        client.create(PODS.collection("default"), gpu_pod("whole", "1"))
        pod = wait_for(lambda: _bound(client, "frac"), what="the fractional pod bound")
        wait_for(lambda: _bound(client, "whole"), what="the whole-GPU pod bound")
    finally:
        running.stop()
    cm = client.get(CONFIGMAPS.item("frac-gpu-share", "default"))
    assert cm is not None
    index = pod["metadata"]["annotations"]["gpushare.io/gpu-indices"]
    data = cm["data"]
    assert data["NVIDIA_VISIBLE_DEVICES"] == index
    assert data["CUDA_MPS_PIPE_DIRECTORY"] == f"/run/gpushare/mps/gpu{index}/pipe"
    assert data["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    memory = int(data["GPUSHARE_GPU_MEMORY_MIB"])
    assert memory > 0 and data["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={memory}M"
    owner = cm["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"]) == ("Pod", created["metadata"]["uid"])
    # written before the bind: the store's versions grow with each write
    assert int(cm["metadata"]["resourceVersion"]) < int(pod["metadata"]["resourceVersion"])
    assert client.get(CONFIGMAPS.item("whole-gpu-share", "default")) is None


def test_a_fractional_pod_the_webhook_missed_is_not_bound(
        cluster: tuple[KubeClient, str]) -> None:
    client, kubeconfig = cluster
    # as when the webhook was down under failurePolicy Ignore
    client.delete("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/gpushare")
    running = start_controllers(kubeconfig, enabled=("pod-grouper", "scheduler"),
                                metrics_push_interval=None, gpu_share_configmaps=True)
    try:
        created = client.create(PODS.collection("default"), gpu_pod("missed", "0.5"))
        assert "envFrom" not in created["spec"]["containers"][0]
        event = wait_for(lambda: next(
            (e for e in client.list(EVENTS.collection("default"))["items"]
             if e["involvedObject"]["name"] == "missed" and e["reason"] == "FailedBinding"),
            None), what="the FailedBinding event")
        assert "gpushare webhook" in event["message"]
        assert _bound(client, "missed") is None
    finally:
        running.stop()
    assert client.get(CONFIGMAPS.item("missed-gpu-share", "default")) is None
