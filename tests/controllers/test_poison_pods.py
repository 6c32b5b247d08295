"""Pods no scheduler arithmetic can use are reported, never let into a cycle: also when
they are in the store already (written there directly here), the controllers tell each
why it waits, naming the field, and schedule the others."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpushare.api.quantity import QuantityError, parse_quantity
from gpushare.apiserver.http.server import ApiServer
from gpushare.cli.compose import api_server
from gpushare.controller_manager import start_controllers
from gpushare.controllers.scheduling.translate import TranslateError, cpu_memory_requests
from gpushare.kube.client import EVENTS, PODS, KubeClient
from store_edit import store_put
from waiting import wait_for


def _pod(**spec: object) -> dict[str, object]:
    return {"metadata": {"name": "p", "namespace": "default"}, "spec": spec}


@pytest.mark.parametrize("value", ["1e400", "1e19", 1e300, float("inf"), "9Ei", True])
def test_out_of_range_quantities_are_refused(value: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(value)  # type: ignore[arg-type]


def test_parse_quantity_still_reads_the_usual_forms() -> None:
    assert parse_quantity("500m") * 2 == 1
    assert parse_quantity("1Gi") == 2**30
    assert parse_quantity("1e3") == 1000
    assert parse_quantity(4) == 4


@pytest.mark.parametrize(("spec", "field"), [
    ({"containers": [{"resources": {"requests": {"memory": "1e400"}}}]},
     "spec.containers[0].resources.requests.memory"),
    ({"containers": [{}], "initContainers": "x"}, "spec.initContainers"),
    ({"containers": ["x"]}, "spec.containers[0]"),
    ({"containers": [{"resources": {"requests": "x"}}]}, "spec.containers[0].resources"),
])
def test_a_malformed_pod_is_a_translate_error_naming_the_field(spec: dict[str, object],
                                                               field: str) -> None:
    with pytest.raises(TranslateError, match=field.replace("[", r"\[").replace("]", r"\]")):
        cpu_memory_requests(_pod(**spec))


def test_a_good_pod_still_sums_its_requests() -> None:
    pod = _pod(containers=[{"resources": {"requests": {"cpu": "250m", "memory": "1Gi"}}},
                           {"resources": {"requests": {"cpu": "1"}}}],
               initContainers=[{"resources": {"requests": {"memory": "2Gi"}}}])
    assert cpu_memory_requests(pod) == (1250, 2 * 2**30)


QUEUE = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "team"},
         "spec": {"resources": {"gpu": {"quota": 1, "limit": -1, "overQuotaWeight": 1}}}}


def _stored_pod(name: str, spec: dict[str, Any], annotations: dict[str, str] | None = None
                ) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}",
                         "creationTimestamp": "2026-01-01T00:00:00Z",
                         "labels": {"kai.scheduler/queue": "team"},
                         "annotations": annotations or {}},
            "spec": {"schedulerName": "gpushare", **spec}}


MAIN = {"name": "main", "image": "busybox"}
STORED = {  # name -> (pod, the field its reason names)
    "a-memory-1e400": (_stored_pod("a-memory-1e400", {"containers": [
        {**MAIN, "resources": {"requests": {"memory": "1e400"}}}]}),
        "spec.containers[0].resources.requests.memory"),
    "a-init-string": (_stored_pod("a-init-string", {"initContainers": "x",
                                                     "containers": [MAIN]}),
                      "spec.initContainers"),
    "a-containers-string": (_stored_pod("a-containers-string", {"containers": "x"}),
                            "spec.containers"),
    "a-fraction-words": (_stored_pod("a-fraction-words", {"containers": [MAIN]},
                                     {"gpu-fraction": "lots"}), "gpu-fraction"),
}


@pytest.fixture
def poisoned(tmp_path: Path) -> Iterator[tuple[ApiServer, KubeClient]]:
    server = api_server(tmp_path / "data", "127.0.0.1", 0)
    server.start()
    kubeconfig = server.write_kubeconfig(tmp_path / "admin.kubeconfig")
    client = KubeClient.from_kubeconfig(str(kubeconfig))
    try:
        yield server, client
    finally:
        client.close()
        server.stop()


def _reasons(client: KubeClient, name: str) -> list[str]:
    return [str(e.get("message")) for e in client.list(EVENTS.collection("default"))["items"]
            if e["involvedObject"]["name"] == name and e.get("reason") == "Unschedulable"]


def test_stored_malformed_pods_wait_with_a_reason_and_the_others_are_scheduled(
        poisoned: tuple[ApiServer, KubeClient], tmp_path: Path) -> None:
    server, client = poisoned
    kubeconfig = str(tmp_path / "admin.kubeconfig")
    added = subprocess.run([sys.executable, "-m", "gpushare.cli.main", "node", "add", "box",
                            "--gpus", "1xL40S", "--no-taint", "--kubeconfig", kubeconfig],
                           capture_output=True, text=True, timeout=60)
    assert added.returncode == 0, added.stderr
    client.create("/apis/scheduling.run.ai/v2/queues", QUEUE)
    for pod, _ in STORED.values():
        store_put(server, "pods", pod)
    running = start_controllers(kubeconfig, enabled=("pod-grouper", "scheduler",
                                                     "queue-status"))
    try:
        good = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "z-good", "namespace": "default",
                             "labels": {"kai.scheduler/queue": "team"},
                             "annotations": {"gpu-fraction": "0.5"}},
                "spec": {"schedulerName": "gpushare", "containers": [MAIN]}}
        client.create(PODS.collection("default"), good)
        wait_for(lambda: (client.get(PODS.item("z-good", "default")) or {}).get(
            "spec", {}).get("nodeName") == "box", what="the good pod bound")
        for name, (_, field) in STORED.items():
            reasons = wait_for(lambda name=name: _reasons(client, name),
                               what=f"{name} told why it waits")
            assert field in reasons[0], (name, reasons)
            stored = client.get(PODS.item(name, "default")) or {}
            assert not stored.get("spec", {}).get("nodeName"), name
        # The condition reaches even a pod whose spec is malformed (a status write).
        conditions = wait_for(lambda: (client.get(PODS.item("a-init-string", "default"))
                                       or {}).get("status", {}).get("conditions"),
                              what="PodScheduled=False on a malformed pod")
        scheduled = next(c for c in conditions if c["type"] == "PodScheduled")
        assert scheduled["status"] == "False" and "spec.initContainers" in scheduled["message"]
    finally:
        running.stop()


def _stored_job(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": spec}


def test_stored_malformed_jobs_do_not_stop_the_job_controller(
        poisoned: tuple[ApiServer, KubeClient], tmp_path: Path) -> None:
    server, client = poisoned
    template = {"metadata": {"labels": {"kai.scheduler/queue": "team"}},
                "spec": {"restartPolicy": "Never", "containers": [MAIN]}}
    store_put(server, "batch/jobs", _stored_job("a-template-containers-string", {
        "template": {"spec": {"restartPolicy": "Never", "containers": "x"}}}))
    store_put(server, "batch/jobs", _stored_job("a-parallelism-words", {
        "parallelism": "lots", "completions": [], "template": template}))
    store_put(server, "batch/jobs", _stored_job("a-template-string", {"template": "x"}))
    running = start_controllers(str(tmp_path / "admin.kubeconfig"),
                                enabled=("job-controller",), metrics_push_interval=None)
    try:
        client.create("/apis/batch/v1/namespaces/default/jobs", {
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "z-good"},
            "spec": {"template": template}})
        wait_for(lambda: [p for p in client.list(PODS.collection("default"))["items"]
                          if p["metadata"].get("labels", {}).get("job-name") == "z-good"],
                 what="the good Job's pod")
        # The one whose pods the API refuses says why, naming the field.
        failed = wait_for(lambda: [
            e for e in client.list(EVENTS.collection("default"))["items"]
            if e["involvedObject"]["name"] == "a-template-containers-string"
            and e.get("reason") == "FailedCreate"], what="FailedCreate on the bad template")
        assert "spec.containers" in failed[0]["message"], failed[0]
    finally:
        running.stop()
