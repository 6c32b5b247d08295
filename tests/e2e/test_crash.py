"""kill -9 the API server during a burst of pod creations with the scheduler running:
every acknowledged pod survives the restart and no GPU is booked twice."""

from __future__ import annotations

import threading
from collections import defaultdict
from fractions import Fraction

from e2e_support import wait_for

from gpushare.controllers.events import now_rfc3339
from gpushare.controllers.nodes.static_nodes import register_static_node, static_node
from gpushare.kube.client import PODS, QUEUES, KubeClient

SIZES = ("0.25", "0.5", "0.25", None)  # fractions, then a whole GPU


def _pod(i: int) -> dict:
    size = SIZES[i % len(SIZES)]
    container: dict = {"name": "c", "image": "busybox"}
    annotations = {}
    if size is None:
        container["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    else:
        annotations["gpu-fraction"] = size
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"burst-{i}", "namespace": "default",
                         "labels": {"kai.scheduler/queue": "burst"},
                         "annotations": annotations},
            "spec": {"schedulerName": "gpushare", "containers": [container]}}


def _bookings(pods: list[dict]) -> dict[tuple[str, int], list[tuple[str, Fraction]]]:
    per_gpu: dict[tuple[str, int], list[tuple[str, Fraction]]] = defaultdict(list)
    for pod in pods:
        node = pod["spec"].get("nodeName")
        ann = pod["metadata"].get("annotations") or {}
        if not node or not ann.get("gpushare.io/gpu-indices"):
            continue
        portion = Fraction(ann["gpushare.io/gpu-portion"])
        for index in ann["gpushare.io/gpu-indices"].split(","):
            per_gpu[(node, int(index))].append((pod["metadata"]["name"], portion))
    return per_gpu


def test_server_crash_loses_no_acknowledged_pod_and_books_no_gpu_twice(server, controllers):
    client = KubeClient.from_kubeconfig(str(server.kubeconfig))
    for n in range(20):
        register_static_node(client, static_node(f"n{n}", "8xH100", "64", "512Gi", {},
                                                 now_rfc3339(), taint=False))
    client.create(QUEUES.collection(), {
        "apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "burst"},
        "spec": {"resources": {r: {"quota": -1, "limit": -1, "overQuotaWeight": 1}
                               for r in ("gpu", "cpu", "memory")}}})
    acknowledged: list[str] = []
    killed = threading.Event()

    def burst() -> None:
        for i in range(240):
            if killed.is_set():
                return
            try:
                client.create(PODS.collection("default"), _pod(i))
            except Exception:
                return  # the server is gone; this create was not acknowledged
            acknowledged.append(f"burst-{i}")

    creator = threading.Thread(target=burst)
    creator.start()
    wait_for(lambda: len(acknowledged) >= 80, what="80 acknowledged creates")
    server.kill()
    killed.set()
    creator.join(30)
    assert len(acknowledged) >= 80

    server.start()
    survivors = {p["metadata"]["name"] for p in
                 client.list(PODS.collection("default"))["items"]}
    assert set(acknowledged) <= survivors

    # The scheduler reconnects and places them all (20 nodes x 8 GPUs hold 240 pods).
    def settled():
        pods = client.list(PODS.collection("default"))["items"]
        bound = [p for p in pods if p["spec"].get("nodeName")]
        return pods if len(bound) == len(pods) else None

    pods = wait_for(settled, timeout=60, what="every surviving pod bound")
    for gpu, holders in _bookings(pods).items():
        assert sum(portion for _, portion in holders) <= 1, (gpu, holders)
        if any(portion == 1 for _, portion in holders):
            assert len(holders) == 1, (gpu, holders)
    client.close()
