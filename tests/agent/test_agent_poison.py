"""A malformed pod bound to the agent's node (stored before validation, or by an older
version: these tests write it straight into the store) is skipped by the agent with a
Warning Event and a log line naming it, while the other pods on the node still start —
whether the pod is in the agent's first list or arrives on its watch."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from test_agent_e2e import NODE, NS, Cluster, wait_for

from gpushare.apiserver.storage.store import Store
from gpushare.cli.compose import api_server
from gpushare.kube.client import EVENTS
from store_edit import store_put

SKIPPED = "FailedCreatePodSandBox"


def _pod(name: str, spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}",
                         "creationTimestamp": "2026-01-01T00:00:00Z", **meta},
            "spec": {"nodeName": NODE, "restartPolicy": "Never", **spec}}


SLEEP = {"name": "main", "image": "busybox", "command": ["sleep", "60"]}
# Sorted before the good pods, so that a reader that stops at the first bad pod would never
# reach them.
POISON = [
    _pod("a-init-string", {"initContainers": "x", "containers": [SLEEP]}),
    _pod("a-containers-string", {"containers": "x"}),
    _pod("a-container-number", {"containers": [1]}),
    _pod("a-command-string", {"containers": [{"name": "main", "command": 7, "args": {}}]}),
    _pod("a-env-strings", {"containers": [{**SLEEP, "env": ["x"], "envFrom": "y"}]}),
    _pod("a-annotations-string", {"containers": [SLEEP]}, annotations="x"),
]
# The field each one's Event names.
FIELDS = {"a-init-string": "spec.initContainers", "a-containers-string": "spec.containers",
          "a-container-number": "spec.containers[0]",
          "a-command-string": "spec.containers[0].command",
          "a-env-strings": "spec.containers[0].env[0]",
          "a-annotations-string": "metadata.annotations"}
# Well-formed, but slots that name no GPU: refused as the kubelet refuses a pod it cannot
# admit, with the pod Failed and the annotation named.
BAD_SLOTS = _pod("a-slots-garbage", {"containers": [SLEEP]},
                 annotations={"gpushare.io/gpu-indices": "zero", "gpushare.io/gpu-portion": "1"})
GOOD_STORED = _pod("b-good-stored", {"containers": [SLEEP]})


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("agent-poison")
    first = api_server(root / "api")  # bootstrap the data directory, then stop
    first.start()
    first.stop()
    store = Store(root / "api" / "state.db")
    for obj in [*POISON, BAD_SLOTS, GOOD_STORED]:
        store.put("root", "pods", orjson.loads(orjson.dumps(obj)))
    store.close()
    c = Cluster(root)
    c.start_agent()
    yield c
    if c.agent is not None:
        c.kill_agent(signal.SIGTERM)
    c.server.stop()


def _skip_events(cluster: Cluster, name: str) -> list[dict[str, Any]]:
    return [e for e in cluster.kube.list(EVENTS.collection(NS))["items"]
            if e.get("reason") == SKIPPED and e["involvedObject"]["name"] == name]


def _agent_log(cluster: Cluster) -> str:
    return Path(cluster.root / "agent.log").read_text(errors="replace")


def test_malformed_pods_in_the_first_list_are_skipped_and_the_others_start(
        cluster: Cluster) -> None:
    cluster.wait_phase(GOOD_STORED["metadata"]["name"], "Running")
    for obj in POISON:
        name = obj["metadata"]["name"]
        events = wait_for(lambda name=name: _skip_events(cluster, name))
        assert FIELDS[name] in events[0]["message"], events[0]
        lines = [line for line in _agent_log(cluster).splitlines()
                 if f"skipping pod {NS}/{name}: it cannot be run: " in line]
        assert lines and FIELDS[name] in lines[0], lines
        # skipped once: one Event, not one per re-list
        assert len(events) == 1, events
        assert not (cluster.pod(name) or {}).get("status", {}).get("containerStatuses")
    refused = cluster.wait_phase("a-slots-garbage", "Failed")
    assert "gpushare.io/gpu-indices" in refused["status"]["message"]
    # A pod created through the API after them starts as well.
    cluster.create_pod("c-good-created", [dict(SLEEP)])
    cluster.wait_phase("c-good-created", "Running")
    # The agent never fell back to listing again and again over them.
    assert "pod watch broke" not in _agent_log(cluster)


def test_a_malformed_pod_arriving_on_the_watch_is_skipped(cluster: Cluster) -> None:
    store_put(cluster.server, "pods", _pod("d-init-string-live", {"initContainers": "x",
                                                                  "containers": [SLEEP]}))
    events = wait_for(lambda: _skip_events(cluster, "d-init-string-live"))
    assert "spec.initContainers" in events[0]["message"]
    cluster.create_pod("e-good-after-live", [dict(SLEEP)])
    cluster.wait_phase("e-good-after-live", "Running")
    assert "skipping pod default/d-init-string-live" in _agent_log(cluster)
    assert "pod watch broke" not in _agent_log(cluster)


def test_a_malformed_pod_being_deleted_is_finished(cluster: Cluster) -> None:
    store_put(cluster.server, "pods", _pod(
        "f-deleted-malformed", {"containers": "x"},
        deletionTimestamp="2026-01-01T00:00:00Z", deletionGracePeriodSeconds=30))
    wait_for(lambda: cluster.pod("f-deleted-malformed") is None)
