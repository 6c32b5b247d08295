"""A real API server on a free port per test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from apiserver_harness import Cluster
from kubernetes import client

from gpushare.cli.compose import api_server


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    data = tmp_path_factory.mktemp("apiserver")
    server = api_server(data, "127.0.0.1", 0, bookmark_interval=0.5, event_log_size=200)
    server.start()
    try:
        yield Cluster(server, data / "admin.kubeconfig", data / "kubectl-cache")
    finally:
        server.stop()


@pytest.fixture(scope="module")
def core(cluster: Cluster) -> client.CoreV1Api:
    return client.CoreV1Api(cluster.api_client())


@pytest.fixture(scope="module")
def custom(cluster: Cluster) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(cluster.api_client())
