"""The client layer: the token-refresh hook throttle, paths of resources."""

from __future__ import annotations

from kubernetes import client as k8s_client

from gpushare.kube.client import JOBS, NODES, QUEUES, _throttled


def test_refresh_hook_runs_at_most_once_per_period_and_survives_reinstalling_itself():
    configuration = k8s_client.Configuration()
    calls = []

    def loader_hook(cfg):
        calls.append(1)
        cfg.refresh_api_key_hook = loader_hook  # the kubeconfig loader reinstalls itself

    configuration.refresh_api_key_hook = _throttled(loader_hook)
    for _ in range(100):
        configuration.refresh_api_key_hook(configuration)
    assert len(calls) == 1
    assert configuration.refresh_api_key_hook is not loader_hook
    assert _throttled(None) is None


def test_resource_paths():
    assert JOBS.item("j", "ns", "status") == "/apis/batch/v1/namespaces/ns/jobs/j/status"
    assert NODES.item("n") == "/api/v1/nodes/n"
    assert QUEUES.collection() == "/apis/scheduling.run.ai/v2/queues"
