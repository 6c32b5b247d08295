"""What a waiting pod and a queue are told: each pod its own reason (not a sibling's),
and a warning when top-level quotas promise more GPUs than the cluster has."""

from __future__ import annotations

from gpushare.cli.status import status_report
from gpushare.controllers.scheduling.scheduling_status import reason_for_pod
from gpushare.model.queue import root_quota_overcommit

WHY = "0/1 nodes are available: 1 node(s) were unschedulable."


def test_each_pod_of_a_group_is_told_about_itself():
    reason = f"Resources were not found for pod ml/gang-0 due to: {WHY}"
    assert reason_for_pod(reason, "ml/gang-0") == reason
    assert reason_for_pod(reason, "ml/gang-2") == (
        f"Resources were not found for pod ml/gang-2 due to: {WHY}")
    gang = ("Resources were found for 1 pods while 3 are required for gang scheduling. "
            f"Additional pods cannot be scheduled due to: {WHY}")
    assert reason_for_pod(gang, "ml/gang-1") == gang  # names no pod: the same for all
    other = "OverLimit: queue ml-org: allocated 0.99 + request 0.33 GPU > limit 1.00"
    assert reason_for_pod(other, "ml/x") == other


def test_root_quotas_above_the_cluster_are_warned_about():
    assert root_quota_overcommit({"a": 0.5, "b": 0.5}, 1.0) is None
    assert root_quota_overcommit({"a": 2.0, "unlimited": -1.0}, 0.0) is None  # no nodes yet
    message = root_quota_overcommit({"a": 1.0, "b": 1.0, "c": 0.0, "d": -1.0}, 1.0)
    assert message is not None
    assert "sum to 2 (a 1, b 1)" in message and "has 1 GPU(s)" in message


def _queue(name: str, quota: float, parent: str | None = None) -> dict:
    spec: dict = {"resources": {"gpu": {"quota": quota, "limit": -1}}}
    if parent:
        spec["parentQueue"] = parent
    return {"metadata": {"name": name}, "spec": spec, "status": {}}


def _node(gpus: str, ready: bool = True, cordoned: bool = False) -> dict:
    return {"metadata": {"name": "n", "labels": {}, "annotations": {}},
            "spec": {"unschedulable": cordoned},
            "status": {"capacity": {"nvidia.com/gpu": gpus},
                       "conditions": [{"type": "Ready", "status": str(ready)}]}}


def test_status_report_carries_the_warning():
    queues = [_queue("org-a", 1), _queue("org-b", 1), _queue("team", 0.5, "org-a")]
    report = status_report(queues, [_node("1")], [], [])
    assert len(report["warnings"]) == 1
    # nodes the scheduler does not count do not count here either
    fits = status_report(queues, [_node("1"), _node("1")], [], [])["warnings"]
    assert fits == []
    for other in (_node("1", ready=False), _node("1", cordoned=True)):
        assert len(status_report(queues, [_node("1"), other], [], [])["warnings"]) == 1
    assert "org-a 1, org-b 1" in report["warnings"][0]
    assert status_report(queues, [_node("2")], [], [])["warnings"] == []
