"""Maximum runtime through the real API: a Job of a queue with ``spec.maxRuntime`` runs past
it, its pod is evicted (Events, ``DisruptionTarget``, the PodGroup's ``Requeued``
condition), the Job's replacement waits out the delay and is placed after it; with policy
``fail`` the PodGroup ends Failed and a new pod of it is never placed; malformed limits are
refused naming the field. Real API server, real controllers; no agent (pods are bound, not
run: the runtime counts from the bind)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from api_cluster import events, node_cluster
from gpushare.api.timefmt import parse_rfc3339
from gpushare.controller_manager import start_controllers
from gpushare.kube.client import PODGROUPS, PODS, ApiError, KubeClient
from waiting import wait_for

QUEUES = "/apis/scheduling.run.ai/v2/queues"
JOBS = "/apis/batch/v1/namespaces/default/jobs"
ENABLED = ("pod-grouper", "job-controller", "scheduler", "max-runtime", "static-node-pods")


def _queue(max_runtime: Any) -> dict[str, Any]:
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
            "metadata": {"name": "team"},
            "spec": {"maxRuntime": max_runtime,
                     "resources": {"gpu": {"quota": 2, "limit": -1, "overQuotaWeight": 1}}}}


def _container() -> list[dict[str, Any]]:
    return [{"name": "main", "image": "busybox",
             "resources": {"limits": {"nvidia.com/gpu": "1"}}}]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[KubeClient, str]]:
    with node_cluster(tmp_path, "2xH100") as made:
        yield made


def _condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or ()
                 if c.get("type") == kind), None)


def _group(client: KubeClient, name: str) -> dict[str, Any]:
    return client.get(PODGROUPS.item(name, "default")) or {}


def _mark(client: KubeClient, name: str) -> dict[str, Any] | None:
    text = (_group(client, name)["metadata"].get("annotations") or {}).get(
        "gpushare.io/max-runtime-exceeded")
    return json.loads(text) if text else None


def _evicted(client: KubeClient, name: str) -> Any:
    """``"gone"`` once the pod is deleted, the pod while it terminates, else None."""
    pod = client.get(PODS.item(name, "default"))
    if pod is None:
        return "gone"
    return pod if pod["metadata"].get("deletionTimestamp") else None


def _job_pods(client: KubeClient) -> list[dict[str, Any]]:
    return [p for p in client.list(PODS.collection("default"))["items"]
            if (p["metadata"].get("labels") or {}).get("job-name") == "train"]


def test_a_job_past_its_queue_max_runtime_is_evicted_and_requeued_after_the_delay(
        cluster: tuple[KubeClient, str]) -> None:
    client, kubeconfig = cluster
    client.create(QUEUES, _queue({"seconds": 2, "policy": "requeue", "requeueDelaySeconds": 4}))
    running = start_controllers(kubeconfig, enabled=ENABLED, metrics_push_interval=None)
    try:
        client.create(JOBS, {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "default",
                         "labels": {"kai.scheduler/queue": "team"}},
            "spec": {"backoffLimit": 10, "template": {
                "metadata": {"labels": {"kai.scheduler/queue": "team"}},
                "spec": {"schedulerName": "gpushare", "restartPolicy": "Never",
                         "containers": _container()}}}})
        first = wait_for(lambda: [p for p in _job_pods(client) if p["spec"].get("nodeName")],
                         what="the Job's pod bound")[0]
        name = first["metadata"]["name"]
        group = first["metadata"]["annotations"]["pod-group-name"]
        mark = wait_for(lambda: _mark(client, group), timeout=30,
                        what="the PodGroup marked past its maximum runtime")
        assert mark["policy"] == "requeue"
        not_before = parse_rfc3339(mark["notBefore"])
        assert not_before - parse_rfc3339(mark["at"]) >= 4
        requeued = wait_for(lambda: _condition(_group(client, group), "Requeued"),
                            what="the Requeued condition")
        assert requeued["reason"] == "MaxRuntimeExceeded"
        assert "maximum runtime of 2s" in requeued["message"]
        wait_for(lambda: events(client, group, "MaxRuntimeExceeded"), what="PodGroup Event")
        wait_for(lambda: events(client, name, "MaxRuntimeExceeded"), what="pod Event")
        # The pod is evicted: marked as a disruption target, then deleted.
        evicted = wait_for(lambda: _evicted(client, name), what="the pod deleted")
        if evicted != "gone":  # still terminating: it says why
            target = _condition(evicted, "DisruptionTarget")
            assert target is not None and target["reason"] == "MaxRuntimeExceeded"
        # The Job makes a replacement; it waits, saying why, and is bound after the delay.
        replacement = wait_for(
            lambda: [p for p in _job_pods(client) if p["metadata"]["name"] != name],
            what="the Job's replacement pod")[0]["metadata"]["name"]
        bound = wait_for(lambda: (client.get(PODS.item(replacement, "default")) or {})
                         .get("spec", {}).get("nodeName"), timeout=60,
                         what="the replacement bound after the delay")
        assert bound == "box"
        scheduled = _condition(client.get(PODS.item(replacement, "default")), "PodScheduled")
        assert scheduled is not None and scheduled["status"] == "True"
        assert parse_rfc3339(scheduled["lastTransitionTime"]) >= not_before
        told = [e["message"] for e in events(client, replacement, "Unschedulable")]
        assert any(m.startswith("MaxRuntimeExceeded:") and "requeued" in m for m in told), told
    finally:
        running.stop()


def test_a_job_past_its_declared_runtime_with_policy_fail_ends_failed(
        cluster: tuple[KubeClient, str]) -> None:
    client, kubeconfig = cluster
    client.create(QUEUES, _queue({"policy": "fail"}))
    # Without static-node-pods the evicted pod stays terminating: what it says is seen.
    running = start_controllers(kubeconfig, enabled=ENABLED[:-1], metrics_push_interval=None)
    try:
        client.create(PODGROUPS.collection("default"), {
            "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": "gang", "namespace": "default",
                         "annotations": {"gpushare.io/expected-runtime": "2s"}},
            "spec": {"minMember": 1, "queue": "team"}})

        def pod(name: str) -> dict[str, Any]:
            return {"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": name, "namespace": "default",
                                 "annotations": {"pod-group-name": "gang"},
                                 "labels": {"kai.scheduler/queue": "team"}},
                    "spec": {"schedulerName": "gpushare", "containers": _container()}}

        client.create(PODS.collection("default"), pod("worker"))
        wait_for(lambda: _group(client, "gang").get("status", {}).get("phase") == "Failed",
                 timeout=30, what="the PodGroup Failed")
        failed = _condition(_group(client, "gang"), "Failed")
        assert failed is not None and failed["reason"] == "MaxRuntimeExceeded"
        assert "maximum runtime of 2s" in failed["message"]
        assert (_mark(client, "gang") or {}).get("policy") == "fail"
        wait_for(lambda: events(client, "worker", "MaxRuntimeExceeded"), what="pod Event")
        evicted = wait_for(lambda: _evicted(client, "worker"), what="the pod evicted")
        target = _condition(evicted, "DisruptionTarget")
        assert target is not None and target["reason"] == "MaxRuntimeExceeded", evicted
        # A pod of the failed group is never placed: the scheduler says why.
        client.create(PODS.collection("default"), pod("again"))
        told = wait_for(lambda: events(client, "again", "Unschedulable"), what="told why")
        assert told[0]["message"].startswith("MaxRuntimeExceeded:")
        assert "failed" in told[0]["message"]
        assert not (client.get(PODS.item("again", "default")) or {})["spec"].get("nodeName")
    finally:
        running.stop()


@pytest.mark.parametrize(("max_runtime", "field"), [
    ({"seconds": -1}, "spec.maxRuntime.seconds"),
    ({"seconds": "two hours"}, "spec.maxRuntime.seconds"),
    ({"seconds": 60, "policy": "later"}, "spec.maxRuntime.policy"),
    ({"requeueDelaySeconds": -5}, "spec.maxRuntime.requeueDelaySeconds"),
])
def test_a_malformed_max_runtime_is_refused_naming_the_field(
        cluster: tuple[KubeClient, str], max_runtime: Any, field: str) -> None:
    client, _ = cluster
    with pytest.raises(ApiError) as refused:
        client.create(QUEUES, _queue(max_runtime))
    assert refused.value.status == 422
    assert field in json.dumps(refused.value.body), refused.value.body
    assert client.get(f"{QUEUES}/team") is None  # nothing half-written
