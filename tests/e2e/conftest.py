"""End-to-end fixtures: a real API server process, the controllers, real kubectl."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_support import KUBECTL, Kubectl, ServerProcess, free_port

from gpushare.kube.client import KubeClient


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    assert Path(KUBECTL).exists(), f"kubectl not found ({KUBECTL}): `make test` installs it"
    data = tmp_path / "data"
    data.mkdir()
    proc = ServerProcess(data, free_port(), tmp_path / "admin.kubeconfig")
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture
def client(server: ServerProcess) -> Iterator[KubeClient]:
    kube = KubeClient.from_kubeconfig(str(server.kubeconfig))
    yield kube
    kube.close()


@pytest.fixture
def controllers(server: ServerProcess):
    from gpushare.controller_manager import start_controllers

    running = start_controllers(str(server.kubeconfig))
    yield running
    running.stop()


@pytest.fixture
def kubectl(server: ServerProcess) -> Kubectl:
    return Kubectl(server.kubeconfig)
