"""Attack (a leak): a tenant reads its pods' Events and status. The host's scheduler writes
them for the host: an `Evict` event names the queue and the host pods the room was made
for (another tenant's), a pending reason names the parent queue the tenant cannot see
(`queue ml-org: ...`). The syncer now hides every queue but the tenant's own and every
pod but its own (translated back to its names) in what it copies to the tenant."""

from __future__ import annotations

import json

import pytest
from tenancy_support import QUEUES, Kubectl, Platform, pod_manifest

from waiting import wait_for


@pytest.fixture(scope="module")
def tenants(platform: Platform) -> tuple[Kubectl, Kubectl]:
    platform.host.apply(QUEUES % {"gpus": 1, "quota": 0.33})
    return (platform.tenant("red", "--queue", "nlp"),
            platform.tenant("blue", "--queue", "vision"))


def _texts(kubectl: Kubectl) -> str:
    """Everything the tenant reads about its pods: Events and statuses."""
    events = kubectl.json("get", "events")["items"]
    pods = kubectl.json("get", "pods")["items"]
    return json.dumps([[e.get("reason"), e.get("message")] for e in events]
                      + [p.get("status") for p in pods])


def _host_texts(platform: Platform, namespace: str) -> str:
    events = platform.host.json("get", "events", "-n", namespace)["items"]
    pods = platform.host.json("get", "pods", "-n", namespace)["items"]
    return json.dumps([e.get("message") for e in events] + [p.get("status") for p in pods])


def test_a_tenant_reads_no_other_tenants_pods_and_no_parent_queue(
        platform: Platform, tenants: tuple[Kubectl, Kubectl]) -> None:
    red, blue = tenants
    for i in range(2):  # red bursts over its quota on the idle GPU
        red.apply(pod_manifest(f"burst-{i}", fraction="0.5"))
    wait_for(lambda: all(p["status"].get("phase") == "Running"
                         for p in red.json("get", "pods")["items"]) and
             len(red.json("get", "pods")["items"]) == 2, 90, "red's pods running")
    red.apply(pod_manifest("one-more", fraction="0.5"))  # past the parent queue's limit
    wait_for(lambda: "ml-org" in _host_texts(platform, "vc-red"), 60,
             "the host's pending reason naming the parent queue")
    blue.apply(pod_manifest("claim", fraction="0.33"))  # reclaims from red
    wait_for(lambda: "vc-blue/" in _host_texts(platform, "vc-red"), 90,
             "the host's Evict event naming blue's host pod")
    wait_for(lambda: "Evict" in _texts(red), 60, "the Evict event in red's cluster")
    wait_for(lambda: "Unschedulable" in _texts(red), 60, "the pending reason in red's cluster")
    seen = _texts(red)
    for secret in ("ml-org", "vc-blue", "vc-red", "blue", "vision"):
        assert secret not in seen, f"red reads {secret!r}: {seen}"
    assert "queue (a platform queue)" in seen  # said, without the name
