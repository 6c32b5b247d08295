"""Attacks on the shared control plane and node by a tenant's pod count and pod churn:

* a pod that ignores SIGTERM, deleted with a long grace period, keeps running while
  `Terminating`: it did not count against the tenant's `maxPods`, so delete-and-recreate
  ran any number of pods. Terminating pods count now.
* a Deployment at 100,000 replicas had the tenant's controllers create pods as fast as the
  API answered, each synced to the host and weighed by its scheduler. The platform sets
  `podCreateRate`/`podCreateBurst` on the VirtualCluster; past them creates answer 429 with
  Retry-After (clients slow down) and another tenant's pod still starts."""

from __future__ import annotations

import json
import time

import pytest
import yaml
from tenancy_support import QUEUES, Kubectl, Platform, pod_manifest

from gpushare.kube.client import ApiError, KubeClient
from waiting import wait_for

RATE, BURST = 2.0, 5


@pytest.fixture(scope="module")
def queues(platform: Platform) -> None:
    platform.host.apply(QUEUES % {"gpus": 1, "quota": 0.33})


def _running(kubectl: Kubectl, name: str) -> bool:
    pod = kubectl.run("get", "pod", name, "-o", "json", check=False)
    return pod.returncode == 0 and json.loads(pod.stdout)["status"].get("phase") == "Running"


def test_terminating_pods_count_against_max_pods(platform: Platform, queues: None) -> None:
    term = platform.tenant("term", "--queue", "recsys", "--max-pods", "2")
    stubborn = pod_manifest("stubborn", fraction="0.01", command=(
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('up', flush=True); time.sleep(3600)")).replace(
        "  restartPolicy: Never", "  restartPolicy: Never\n  terminationGracePeriodSeconds: 300")
    term.apply(stubborn)
    wait_for(lambda: _running(term, "stubborn"), 90, "the stubborn pod running")
    term.run("delete", "pod", "stubborn", "--wait=false")
    wait_for(lambda: term.json("get", "pod", "stubborn")["metadata"].get("deletionTimestamp"),
             30, "the pod terminating")
    term.apply(pod_manifest("second", fraction="0.01"))
    done = term.run("create", "-f", "-", stdin=pod_manifest("third", fraction="0.01"),
                    check=False)
    assert done.returncode != 0 and "maxPods" in done.stderr, done.stderr
    assert "terminating pods count" in done.stderr
    host = platform.host.json("get", "pods", "-n", "vc-term")["items"]
    assert len(host) <= 2, [p["metadata"]["name"] for p in host]
    term.run("delete", "pod", "stubborn", "--grace-period=0", "--force", check=False)


def test_a_replica_flood_is_rate_limited_and_others_still_start(
        platform: Platform, queues: None) -> None:
    flood = platform.tenant("flood", "--queue", "nlp", "--pod-create-rate", str(RATE),
                            "--pod-create-burst", str(BURST))
    calm = platform.tenant("calm", "--queue", "vision")
    started = time.monotonic()
    flood.apply(json.dumps({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "flood", "namespace": "default"},
        "spec": {"replicas": 100000, "selector": {"matchLabels": {"app": "flood"}},
                 "template": {"metadata": {"labels": {"app": "flood"}}, "spec": {
                     "schedulerName": "gpushare",
                     "containers": [{"name": "c", "image": "python",
                                     "command": ["sleep", "3600"],
                                     "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}}))
    wait_for(lambda: len(flood.json("get", "pods")["items"]) >= BURST, 60,
             "the flood's first pods")
    # straight to the API (no client retries): past the rate a create answers 429 with
    # the seconds to wait, which kubectl and client-go honour as Retry-After
    client = KubeClient.from_kubeconfig(str(flood.kubeconfig))
    answers = []
    for i in range(3 * BURST):
        try:
            client.create("/api/v1/namespaces/default/pods",
                          yaml.safe_load(pod_manifest(f"extra-{i}", fraction="0.01")))
            answers.append(201)
        except ApiError as e:
            assert e.status == 429 and "podCreateRate" in str(e.body.get("message")), e.body
            assert e.body["details"]["retryAfterSeconds"] >= 1, e.body
            answers.append(e.status)
    client.close()
    assert 429 in answers, answers
    calm.apply(pod_manifest("calm", fraction="0.33"))
    wait_for(lambda: _running(calm, "calm"), 90, "the other tenant's pod running")
    made = len(flood.json("get", "pods")["items"])
    elapsed = time.monotonic() - started
    assert made <= BURST + RATE * elapsed + 1, (made, elapsed)
    flood.run("delete", "deployment", "flood", "--wait=false")
