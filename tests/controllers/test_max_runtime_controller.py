"""The max-runtime controller's passes against a real API server, driven with chosen
times (``sync(now)``): nothing before the limit, one stop at it (mark, condition beside
the others, Events, ``DisruptionTarget``, deletion), no second stop of the same run, and
``Requeued`` turning False once the delay is over."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from gpushare.api.timefmt import parse_rfc3339, rfc3339
from gpushare.controllers.events import EventRecorder
from gpushare.controllers.scheduling.max_runtime_controller import MaxRuntimeController
from gpushare.kube.client import EVENTS, NODES, PODGROUPS, PODS, QUEUES, KubeClient, Stopper
from gpushare.kube.informers import InformerFactory
from waiting import wait_for

QUEUE = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "team"},
         "spec": {"maxRuntime": {"seconds": 100, "requeueDelaySeconds": 30},
                  "resources": {"gpu": {"quota": 1, "limit": -1, "overQuotaWeight": 1}}}}
RESERVED = {"type": "Reserved", "status": "True", "reason": "NodesReserved",
            "message": "held", "lastTransitionTime": "2026-01-01T00:00:00Z"}


@pytest.fixture
def controller(api: KubeClient) -> Iterator[MaxRuntimeController]:
    api.create(NODES.collection(), {"apiVersion": "v1", "kind": "Node",
                                    "metadata": {"name": "box"}})
    api.create(QUEUES.collection(), QUEUE)
    api.create(PODGROUPS.collection("default"), {
        "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
        "metadata": {"name": "job", "namespace": "default"},
        "spec": {"minMember": 2, "queue": "team"}})
    api.merge_patch(PODGROUPS.item("job", "default", "status"),
                    {"status": {"conditions": [RESERVED]}})
    for i in range(2):
        api.create(PODS.collection("default"), {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"w{i}", "namespace": "default",
                         "annotations": {"pod-group-name": "job"}},
            "spec": {"schedulerName": "gpushare",
                     "containers": [{"name": "main", "image": "busybox"}]}})
        api.create(PODS.item(f"w{i}", "default", "binding"), {
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": f"w{i}"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "box"}})
    stopper = Stopper()
    informers = InformerFactory(api, stopper)
    events = EventRecorder(api, "test", stopper)
    made = MaxRuntimeController(api, informers, stopper, events)
    informers.start()
    assert informers.wait_synced(10)
    events.start()
    yield made
    stopper.stop()
    informers.stop()


def _placed(api: KubeClient) -> float:
    """The gang's running since: the later of the two binds."""
    return max(parse_rfc3339(next(c["lastTransitionTime"] for c in
                                  (api.get(PODS.item(f"w{i}", "default")) or {})["status"][
                                      "conditions"] if c["type"] == "PodScheduled"))
               for i in range(2))


def _warned(api: KubeClient) -> set[str]:
    return {e["involvedObject"]["name"] for e in api.list(EVENTS.collection("default"))["items"]
            if e.get("reason") == "MaxRuntimeExceeded"}


def _group(api: KubeClient) -> dict[str, Any]:
    return api.get(PODGROUPS.item("job", "default")) or {}


def _conditions(api: KubeClient) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (_group(api).get("status") or {}).get("conditions") or []}


def test_one_stop_at_the_limit_then_the_delay_released(api: KubeClient,
                                                        controller: MaxRuntimeController
                                                        ) -> None:
    wait_for(lambda: len([p for p in controller.pods.items() if p["spec"].get("nodeName")]) == 2,
             what="the bound pods in the cache")
    since = _placed(api)
    assert controller.sync(since + 99) == since + 100  # due at its limit; nothing done
    assert "gpushare.io/max-runtime-exceeded" not in (_group(api)["metadata"].get(
        "annotations") or {})
    controller.sync(since + 100.5)
    mark = json.loads(_group(api)["metadata"]["annotations"]["gpushare.io/max-runtime-exceeded"])
    assert mark["policy"] == "requeue" and parse_rfc3339(mark["runningSince"]) == since
    assert parse_rfc3339(mark["notBefore"]) == since + 131  # ceil(100.5 + 30)
    conditions = _conditions(api)
    assert conditions["Reserved"] == RESERVED  # another controller's condition is kept
    assert conditions["Requeued"]["status"] == "True"
    assert conditions["Requeued"]["reason"] == "MaxRuntimeExceeded"
    assert rfc3339(since + 131) in conditions["Requeued"]["message"]
    for i in range(2):
        pod = api.get(PODS.item(f"w{i}", "default"))
        assert pod is not None and pod["metadata"].get("deletionTimestamp")  # no agent here
        target = next(c for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget")
        assert target["reason"] == "MaxRuntimeExceeded"
    wait_for(lambda: _warned(api) == {"job", "w0", "w1"}, what="Events on the group and pods")
    # The same run is not stopped twice; the delay's end is what falls due next.
    assert controller.sync(since + 110) == since + 131
    assert json.loads(_group(api)["metadata"]["annotations"][
        "gpushare.io/max-runtime-exceeded"]) == mark
    wait_for(lambda: len(((controller.podgroups.get("default/job") or {}).get("status") or {})
                         .get("conditions") or []) == 2, what="Requeued in the cache")
    controller.sync(since + 131)
    released = _conditions(api)["Requeued"]
    assert released["status"] == "False" and released["reason"] == "RequeueDelayOver"
    assert _conditions(api)["Reserved"] == RESERVED
