"""Queue status: ResourceLists from the scheduler's figures, child queues, change detection."""

from __future__ import annotations

from gpushare.controllers.scheduling.queue_status import children_of, desired_status, status_differs
from gpushare.controllers.scheduling.scheduler_loop import figures_of, resource_list
from gpushare.scheduler.decisions import QueueReport


def test_resource_list_uses_milli_gpus_millicores_and_binary_bytes():
    assert resource_list({"gpu": 0.33, "cpu": 1500.0, "memory": 1024.0}) == {
        "nvidia.com/gpu": "330m", "cpu": "1500m", "memory": "1Gi"}
    assert resource_list({"gpu": float("inf")}) == {"cpu": "0", "memory": "0"}


def test_figures_and_children_make_the_status():
    report = QueueReport(
        fair_share={"gpu": 0.33, "cpu": 0.0, "memory": 0.0},
        deserved={"gpu": 0.33, "cpu": -1, "memory": -1},
        allocated={"gpu": 0.33, "cpu": 0.0, "memory": 0.0},
        allocated_non_preemptible={"gpu": 0.0, "cpu": 0.0, "memory": 0.0},
        requested={"gpu": 0.66, "cpu": 0.0, "memory": 0.0},
    )
    queues = [{"metadata": {"name": "org"}, "spec": {}},
              {"metadata": {"name": "b"}, "spec": {"parentQueue": "org"}},
              {"metadata": {"name": "a"}, "spec": {"parentQueue": "org"}}]
    assert children_of(queues) == {"org": ["a", "b"]}
    status = desired_status("a", figures_of(report), [])
    assert status["allocated"]["nvidia.com/gpu"] == "330m"
    assert status["requested"]["nvidia.com/gpu"] == "660m"
    assert status["childQueues"] == []
    assert status_differs({"status": {}}, status)
    assert not status_differs({"status": dict(status)}, status)


def test_podgroup_phase_follows_its_gang():
    from gpushare.controllers.scheduling.scheduler_loop import podgroup_phase
    from gpushare.model import PodStatus as S

    assert podgroup_phase(2, [S.RUNNING, S.PENDING]) == "Pending"
    assert podgroup_phase(2, [S.RUNNING, S.BINDING, S.PENDING]) == "Running"
    assert podgroup_phase(1, [S.SUCCEEDED, S.SUCCEEDED]) == "Succeeded"
    assert podgroup_phase(1, [S.SUCCEEDED, S.FAILED]) == "Failed"
    assert podgroup_phase(1, []) == "Pending"
