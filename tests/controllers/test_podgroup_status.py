"""PodGroup resourcesStatus: what the group's pods request and hold, as KAI writes it."""

from __future__ import annotations

from typing import Any

from gpushare.controllers.scheduling.podgroup_status import (
    holds_place,
    merge_patch_to,
    pod_allocated,
    pod_requested,
    resources_status,
    status_echo,
)


def _pod(phase: str = "Pending", *, node: str = "", annotations: dict[str, str] | None = None,
         requests: dict[str, str] | None = None, limits: dict[str, str] | None = None,
         scheduled: bool = False) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if scheduled:
        status["conditions"] = [{"type": "PodScheduled", "status": "True"}]
    return {
        "metadata": {"name": "p", "namespace": "ns", "annotations": annotations or {}},
        "spec": {"nodeName": node, "containers": [
            {"name": "a", "resources": {"requests": requests or {}, "limits": limits or {}}},
            {"name": "b", "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}}},
        ], "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "8"}}}]},
        "status": status,
    }



def test_a_whole_gpu_pod_requests_its_containers_sum_without_init_containers():
    pod = _pod(requests={"cpu": "750m", "memory": "1Gi", "nvidia.com/gpu": "2"})
    assert pod_requested(pod) == {"cpu": 1000, "memory": 1536 * 2**20, "nvidia.com/gpu": 2000}


def test_gpu_limits_alone_count_as_the_request():
    pod = _pod(limits={"nvidia.com/gpu": "1"})
    assert pod_requested(pod)["nvidia.com/gpu"] == 1000


def test_a_fraction_counts_fraction_times_devices_and_memory_in_mib():
    fraction = _pod(annotations={"gpu-fraction": "0.5", "gpu-fraction-num-devices": "3"})
    assert pod_requested(fraction)["nvidia.com/gpu"] == 1500
    memory = _pod(annotations={"gpu-memory": "2000", "gpu-fraction-num-devices": "2"})
    requested = pod_requested(memory)
    assert requested["run.ai/gpu.memory"] == 4000 and "nvidia.com/gpu" not in requested


def test_allocated_gpus_are_those_of_the_binding():
    bound = _pod("Running", node="n1", annotations={
        "gpu-memory": "20480", "gpushare.io/gpu-indices": "0,1", "gpushare.io/gpu-portion": "0.25"})
    assert pod_allocated(bound)["nvidia.com/gpu"] == 500


def test_which_pods_hold_their_place():
    assert holds_place(_pod("Running", node="n1"))
    assert holds_place(_pod("Pending", node="n1"))
    assert holds_place(_pod("Pending", scheduled=True))
    assert not holds_place(_pod("Pending"))
    assert not holds_place(_pod("Succeeded", node="n1"))
    assert not holds_place(_pod("Failed", node="n1"))


def test_a_group_sums_active_pods_and_leaves_finished_ones_out():
    gpus = {"cpu": "750m", "memory": "1Gi", "nvidia.com/gpu": "1"}
    running = _pod("Running", node="n1", requests=gpus, annotations={
        "gpushare.io/gpu-indices": "3", "gpushare.io/gpu-portion": "1"})
    waiting = _pod("Pending", requests=gpus)
    done = _pod("Succeeded", node="n1", requests=gpus)
    status = resources_status([running, waiting, done], preemptible=True)
    assert status == {
        "allocated": {"cpu": "1", "memory": "1536Mi", "nvidia.com/gpu": "1"},
        "requested": {"cpu": "2", "memory": "3Gi", "nvidia.com/gpu": "2"},
    }
    held = resources_status([running], preemptible=False)
    assert held["allocatedNonPreemptible"] == held["allocated"]
    assert resources_status([done], preemptible=False) == {}


def test_a_semi_preemptible_group_shows_its_core_as_non_preemptible():
    pods = [_pod("Running", node="n1", requests={"nvidia.com/gpu": "1"}, annotations={
        "gpushare.io/gpu-indices": str(i), "gpushare.io/gpu-portion": "1"}) for i in range(3)]
    status = resources_status(pods, preemptible=True, core=2)
    assert status["allocated"]["nvidia.com/gpu"] == "3"
    assert status["allocatedNonPreemptible"]["nvidia.com/gpu"] == "2"
    assert "allocatedNonPreemptible" not in resources_status(pods, preemptible=True)


def test_fractions_print_as_milli_gpus():
    pods = [_pod("Running", node="n1", annotations={
        "gpu-fraction": "0.33", "gpushare.io/gpu-indices": "0", "gpushare.io/gpu-portion": "0.33"})
        for _ in range(2)]
    status = resources_status(pods, preemptible=True)
    assert status["allocated"]["nvidia.com/gpu"] == "660m"
    assert status["requested"]["nvidia.com/gpu"] == "660m"


def test_the_patch_removes_what_is_gone_and_is_empty_when_nothing_changed():
    current = {"allocated": {"cpu": "1", "nvidia.com/gpu": "2"}, "requested": {"cpu": "1"}}
    wanted = {"allocated": {"cpu": "1"}, "requested": {"cpu": "1"}}
    assert merge_patch_to(current, wanted) == {"allocated": {"nvidia.com/gpu": None}}
    assert merge_patch_to(current, {}) == {"allocated": None, "requested": None}
    assert merge_patch_to(wanted, wanted) == {}
    assert merge_patch_to(None, wanted) == wanted


def test_the_unschedulable_condition_counts_its_transitions():
    from gpushare.controllers.scheduling.scheduling_status import podgroup_unschedulable

    first = podgroup_unschedulable("no GPU fits", "research", "default", None, "t0")
    assert first["transitionID"] == "1"
    assert (first["type"], first["reason"], first["message"], first["status"]) == (
        "UnschedulableOnNodePool", "Unschedulable", "no GPU fits", "True")
    assert first["reasons"] == [{"reason": "Unschedulable", "message": "no GPU fits",
                                 "details": {"queueDetails": {"name": "research"}}}]
    second = podgroup_unschedulable("still none", "research", "pool-a", [first], "t1")
    assert (second["transitionID"], second["nodePool"]) == ("2", "pool-a")
    assert podgroup_unschedulable("x", "q", "p", [{"transitionID": "bad"}], "t")[
        "transitionID"] == "1"


def test_a_status_only_change_matching_what_was_written_is_an_echo():
    written = {"requested": {"cpu": "100m"}}
    old = {"metadata": {"name": "pg", "resourceVersion": "1", "labels": {"a": "b"}},
           "spec": {"minMember": 1, "queue": "q"}, "status": {}}
    ours = {**old, "metadata": {**old["metadata"], "resourceVersion": "2"},
            "status": {"resourcesStatus": written}}
    assert status_echo(ours, old, written)
    phase = {**ours, "status": {**ours["status"], "phase": "Running"}}
    assert status_echo(phase, ours, written)
    assert not status_echo(ours, None, written)  # no previous version
    assert not status_echo(ours, old, None)  # nothing written yet
    assert not status_echo(ours, old, {"requested": {"cpu": "200m"}})  # someone else's
    respec = {**phase, "spec": {"minMember": 2, "queue": "q"}}
    assert not status_echo(respec, phase, written)
    relabel = {**phase, "metadata": {**phase["metadata"], "labels": {"a": "c"}}}
    assert not status_echo(relabel, phase, written)
