"""The agent re-checks every bound pod against its own ledger of GPU slots."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest
from test_agent_e2e import NS, Cluster, wait_for

from gpushare.agent.gpu_share import GpuShare
from gpushare.agent.ledger import OVERCOMMITTED, overcommit
from gpushare.kube.client import EVENTS
from gpushare.model.gpu_inventory import GpuDevice


def _share(portion: float, *indices: int) -> GpuShare:
    devices = tuple(GpuDevice(i, f"GPU-{i}", "NVIDIA-H100", 81559, 132) for i in indices)
    return GpuShare(devices, portion, int(81559 * portion))


def test_ledger_sums_portions_per_gpu() -> None:
    assert overcommit([_share(0.5, 0), _share(0.5, 1)], _share(0.5, 0)) is None
    refused = overcommit([_share(0.5, 0), _share(0.3, 0)], _share(0.3, 0))
    assert refused is not None and "GPU 0" in refused
    assert overcommit([_share(1.0, 1)], _share(1.0, 0)) is None
    assert overcommit([_share(1.0, 1)], _share(1.0, 0, 1)) is not None
    assert overcommit([_share(0.33, 0)] * 3, None) is None
    assert overcommit([_share(0.33, 0), _share(0.33, 0)], _share(0.34, 0)) is None


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("agent-ledger"))
    c.start_agent()
    yield c
    if c.agent is not None:
        c.kill_agent(signal.SIGTERM)
    c.server.stop()


def _slots(index: str, portion: str) -> dict[str, str]:
    return {"gpushare.io/gpu-indices": index, "gpushare.io/gpu-portion": portion,
            "gpushare.io/gpu-memory-mib": "20000"}


def test_a_pod_that_would_over_commit_a_gpu_is_not_started(cluster: Cluster) -> None:
    sleeper = [{"name": "main", "command": ["sleep", "60"]}]
    cluster.create_pod("holder", [dict(c) for c in sleeper], annotations=_slots("0", "0.6"))
    cluster.wait_phase("holder", "Running")
    cluster.create_pod("too-much", [dict(c) for c in sleeper], annotations=_slots("0", "0.5"))
    pod = cluster.wait_phase("too-much", "Failed")
    assert pod["status"]["reason"] == OVERCOMMITTED
    assert "GPU 0" in pod["status"]["message"]
    assert not pod["status"].get("containerStatuses") or all(
        "running" not in (s.get("state") or {}) for s in pod["status"]["containerStatuses"])
    events = wait_for(lambda: [e for e in cluster.kube.list(EVENTS.collection(NS))["items"]
                               if e.get("reason") == OVERCOMMITTED
                               and e["involvedObject"]["name"] == "too-much"])
    assert events
    # What fits still runs.
    cluster.create_pod("fits", [dict(c) for c in sleeper], annotations=_slots("0", "0.4"))
    cluster.wait_phase("fits", "Running")
