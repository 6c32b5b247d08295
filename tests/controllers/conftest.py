"""A real API server in-process, for the controllers' client-side pieces."""

from __future__ import annotations

import pytest

from gpushare.cli.compose import api_server
from gpushare.kube.client import KubeClient


@pytest.fixture
def api(tmp_path):
    server = api_server(tmp_path / "data", "127.0.0.1", 0, event_log_size=5)
    server.start()
    kubeconfig = tmp_path / "admin.kubeconfig"
    server.write_kubeconfig(kubeconfig)
    client = KubeClient.from_kubeconfig(str(kubeconfig))
    yield client
    client.close()
    server.stop()
