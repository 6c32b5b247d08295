"""API objects to the scheduler's model: requests, queues, PodGroups, durations."""

from __future__ import annotations

import re
from fractions import Fraction

import pytest

from gpushare.api.gpu import GpuRequestError, gpu_request
from gpushare.api.quantity import format_bytes, format_milli, to_int, to_milli
from gpushare.controllers.scheduling.translate import (
    TranslateError,
    cpu_memory_requests,
    job_from_podgroup,
    node_affinity,
    node_from_api,
    parse_duration,
    pod_from_api,
    pod_status,
    priority_class_of,
    queue_from_api,
)
from gpushare.model import PodStatus


def pod(annotations=None, limits=None, requests=None, **spec):
    container = {"name": "c", "resources": {}}
    if limits:
        container["resources"]["limits"] = limits
    if requests:
        container["resources"]["requests"] = requests
    return {"metadata": {"name": "p", "annotations": annotations or {}},
            "spec": {"containers": [container], **spec}, "status": {}}


def test_fraction_memory_and_whole_gpu_requests():
    assert gpu_request(pod({"gpu-fraction": "0.33"})).portion == 330
    shared = gpu_request(pod({"gpu-memory": "2000", "gpu-fraction-num-devices": "2"}))
    assert (shared.memory_mib, shared.devices) == (2000, 2)
    assert gpu_request(pod(limits={"nvidia.com/gpu": "2"})).whole == 2
    assert not gpu_request(pod()).wants_gpu


@pytest.mark.parametrize(("annotations", "field"), [
    ({"gpu-fraction": "1.5"}, "gpu-fraction"),
    ({"gpu-fraction": "half"}, "gpu-fraction"),
    ({"gpu-memory": "-3"}, "gpu-memory"),
    ({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "0"}, "gpu-fraction-num-devices"),
])
def test_bad_gpu_annotations_name_the_annotation(annotations, field):
    with pytest.raises(GpuRequestError, match=field):
        gpu_request(pod(annotations))


def test_cpu_and_memory_sum_containers_and_take_the_largest_init_container():
    body = pod(requests={"cpu": "500m", "memory": "1Gi"})
    body["spec"]["containers"].append({"name": "d", "resources": {"requests": {"cpu": "1"}}})
    body["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": "4"}}}]
    assert cpu_memory_requests(body) == (4000, 1024**3)


def test_pod_status_from_phase_node_and_deletion():
    assert pod_status(pod()) is PodStatus.PENDING
    assert pod_status(pod(nodeName="n")) is PodStatus.RUNNING
    terminating = pod(nodeName="n")
    terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert pod_status(terminating) is PodStatus.RELEASING
    done = pod(nodeName="n")
    done["status"]["phase"] = "Succeeded"
    assert pod_status(done) is PodStatus.SUCCEEDED


def test_queue_units_and_defaults():
    queue = queue_from_api({"metadata": {"name": "q"}, "spec": {
        "parentQueue": "org", "priority": 120, "preemptMinRuntime": "10m",
        "resources": {"gpu": {"quota": 0.33, "limit": 1}, "memory": {"quota": 100}}}})
    assert queue.parent == "org" and queue.priority == 120
    assert queue.gpu.quota == Fraction(33, 100) and queue.gpu.limit == 1
    assert queue.gpu.over_quota_weight == 1  # omitted: weight 1
    assert queue.memory.quota == 100 * 1000 * 1000  # MB
    assert queue.cpu.unlimited_limit  # an omitted block does not forbid CPU
    assert queue.preempt_min_runtime == 600


def test_queue_with_non_numeric_quota_names_the_field():
    with pytest.raises(TranslateError, match=r"spec\.resources\.gpu\.quota"):
        queue_from_api({"metadata": {"name": "q"},
                        "spec": {"resources": {"gpu": {"quota": "lots"}}}})


def test_queue_lending_limit_in_the_resource_units():
    queue = queue_from_api({"metadata": {"name": "q"}, "spec": {"resources": {
        "gpu": {"quota": 3, "lendingLimit": 1}, "memory": {"quota": 100, "lendingLimit": 40}}}})
    assert queue.gpu.lending_limit == 1 and queue.gpu.kept == 2
    assert queue.memory.lending_limit == 40 * 1000 * 1000  # MB, like the quota
    assert queue.cpu.lending_limit is None  # unset: everything unused may be lent


@pytest.mark.parametrize(("block", "message"), [
    ({"quota": 3, "lendingLimit": -1}, r"spec\.resources\.gpu\.lendingLimit must be at least 0"),
    ({"quota": 3, "lendingLimit": 4}, r"spec\.resources\.gpu\.lendingLimit may not exceed quota"),
    ({"quota": 3, "lendingLimit": "x"}, r"spec\.resources\.gpu\.lendingLimit must be a number"),
    ({"quota": -1, "lendingLimit": 1}, r"spec\.resources\.gpu\.lendingLimit needs a finite"),
])
def test_queue_bad_lending_limit_names_the_field(block, message):
    with pytest.raises(TranslateError, match=message):
        queue_from_api({"metadata": {"name": "q"}, "spec": {"resources": {"gpu": block}}})


def test_podgroup_priority_and_preemptibility():
    pg = {"metadata": {"name": "pg", "namespace": "ns"},
          "spec": {"queue": "q", "minMember": 4, "priorityClassName": "build"}}
    job = job_from_podgroup(pg, {"build": 100, "train": 50})
    assert (job.priority, job.preemptible, job.min_member) == (100, False, 4)
    pg["spec"]["priorityClassName"] = "train"
    assert job_from_podgroup(pg, {"train": 50}).preemptible
    pg["spec"]["preemptibility"] = "non-preemptible"
    assert not job_from_podgroup(pg, {"train": 50}).preemptible
    pg["spec"]["priorityClassName"] = "unknown"
    assert job_from_podgroup(pg, {}).priority == 50


def test_priority_class_policy_and_a_job_of_a_class_that_never_preempts():
    assert priority_class_of({"metadata": {"name": "c"}, "value": 125}) == (125, True)
    assert priority_class_of({"metadata": {"name": "c"}, "value": 125,
                              "preemptionPolicy": "Never"}) == (125, False)
    with pytest.raises(TranslateError, match=r"priorityclass c: preemptionPolicy"):
        priority_class_of({"metadata": {"name": "c"}, "value": 1, "preemptionPolicy": "No"})
    with pytest.raises(TranslateError, match=r"priorityclass c: value"):
        priority_class_of({"metadata": {"name": "c"}, "value": "high"})
    pg = {"metadata": {"name": "pg", "namespace": "ns"},
          "spec": {"queue": "q", "priorityClassName": "inference"}}
    assert not job_from_podgroup(pg, {"inference": 125}, {"inference"}).may_preempt
    assert job_from_podgroup(pg, {"inference": 125}, {"other"}).may_preempt


def test_node_capacity_labels_and_readiness():
    node = node_from_api({
        "metadata": {"name": "n", "labels": {"nvidia.com/gpu.memory": "46068"}},
        "spec": {},
        "status": {"allocatable": {"nvidia.com/gpu": "2", "cpu": "8", "memory": "32Gi",
                                   "pods": "50"},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    })
    assert (node.gpus, node.gpu_memory_mib, node.cpu_millis, node.max_pods) == (2, 46068, 8000, 50)
    assert node.memory_bytes == 32 * 1024**3 and node.ready


def test_durations():
    assert parse_duration("1h30m") == 5400
    assert parse_duration("500ms") == 0.5
    assert parse_duration("") == 0
    with pytest.raises(TranslateError):
        parse_duration("ten minutes")


def test_quantities_round_trip():
    assert to_milli("0.33") == 330 and to_milli("100m") == 100 and to_milli(2) == 2000
    assert to_int("1Gi") == 1024**3 and to_int("1k") == 1000
    assert format_milli(330) == "330m" and format_milli(2000) == "2"
    assert format_bytes(1024**3) == "1Gi" and format_bytes(1000) == "1000"


def affinity_pod(*terms):
    body = pod()
    body["spec"]["affinity"] = {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}
    return body


def expr(key, operator, *values):
    out = {"key": key, "operator": operator}
    if values:
        out["values"] = list(values)
    return out


PRODUCT = "nvidia.com/gpu.product"


def test_required_gpu_product_affinity_becomes_the_cores_constraint():
    one = affinity_pod({"matchExpressions": [expr(PRODUCT, "In", "T4", "A10")]})
    assert node_affinity(one) == ((PRODUCT, ("A10", "T4")),)
    core = pod_from_api(one, "default/j", 0, 0.0)
    assert core.node_affinity == ((PRODUCT, ("A10", "T4")),)
    other = dict(core.node_selector)  # the no-agent taint's selector, if any
    assert core.matches_labels({**other, PRODUCT: "T4"})
    assert not core.matches_labels({**other, PRODUCT: "V100"})
    assert not core.matches_labels(other)


def test_affinity_terms_and_or_and_unsupported_operators():
    # One term: its In expressions all hold; the same label twice allows what both allow.
    both = affinity_pod({"matchExpressions": [
        expr(PRODUCT, "In", "T4", "A10"), expr("zone", "In", "a"), expr(PRODUCT, "In", "A10"),
        expr("gone", "DoesNotExist")]})
    assert node_affinity(both) == ((PRODUCT, ("A10",)), ("zone", ("a",)))
    # Several terms (any may match): a label every term constrains takes any term's values;
    # a label only some terms constrain is no constraint.
    either = affinity_pod(
        {"matchExpressions": [expr(PRODUCT, "In", "T4"), expr("zone", "In", "a")]},
        {"matchExpressions": [expr(PRODUCT, "In", "V100")]})
    assert node_affinity(either) == ((PRODUCT, ("T4", "V100")),)
    assert node_affinity(affinity_pod({"matchExpressions": [expr("x", "Exists")]})) == ()
    assert node_affinity(pod()) == ()
    preferred = pod()
    preferred["spec"]["affinity"] = {"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "preference": {"matchExpressions": [expr(PRODUCT, "In", "T4")]}}]}}
    assert node_affinity(preferred) == ()


@pytest.mark.parametrize(("term", "field"), [
    ({"matchExpressions": [expr(PRODUCT, "In")]}, "matchExpressions[0].values"),
    ({"matchExpressions": [{"operator": "In", "values": ["T4"]}]}, "matchExpressions[0].key"),
    ({"matchExpressions": {"key": PRODUCT}}, "nodeSelectorTerms[0].matchExpressions"),
    ("T4", "nodeSelectorTerms[0]"),
])
def test_bad_affinity_names_the_field(term, field):
    with pytest.raises(TranslateError, match=re.escape(field)):
        node_affinity(affinity_pod(term))


def test_the_pods_node_pool_label_selects_the_pools_nodes():
    body = pod(nodeSelector={"zone": "a"})
    body["metadata"]["labels"] = {"kai.scheduler/node-pool": "serve"}
    core = pod_from_api(body, "default/j", 0, 0.0)
    assert core.node_selector == {"zone": "a", "kai.scheduler/node-pool": "serve"}
    assert pod_from_api(pod(), "default/j", 0, 0.0).node_selector == {}


def test_queue_gpu_types_by_short_name_or_product_label():
    queue = queue_from_api({"metadata": {"name": "q"}, "spec": {"resources": {"gpu": {
        "quota": 2, "types": {"h100": {"quota": 4, "limit": 6},
                              "NVIDIA-L40S": {"overQuotaWeight": 2}}}}}})
    assert set(queue.gpu_types) == {"H100", "L40S"}
    assert (queue.gpu_types["H100"].quota, queue.gpu_types["H100"].limit) == (4, 6)
    assert (queue.gpu_types["L40S"].quota, queue.gpu_types["L40S"].limit,
            queue.gpu_types["L40S"].over_quota_weight) == (0, -1, 2)
    assert queue.gpu.quota == 2  # the total stays as given


@pytest.mark.parametrize(("entry", "message"), [
    ({"quota": -2}, r"spec\.resources\.gpu\.types\.H100\.quota must be -1 \(unlimited\) or at"),
    ({"quota": 4, "limit": 2}, r"spec\.resources\.gpu\.types\.H100\.limit may not be below "
                               r"quota \(4\), got 2"),
    ({"overQuotaWeight": -1}, r"spec\.resources\.gpu\.types\.H100\.overQuotaWeight must be at"),
    ({"quota": "x"}, r"spec\.resources\.gpu\.types\.H100\.quota must be a number"),
])
def test_queue_bad_gpu_type_names_the_field(entry, message):
    with pytest.raises(TranslateError, match=message):
        queue_from_api({"metadata": {"name": "q"}, "spec": {"resources": {
            "gpu": {"types": {"H100": entry}}}}})
