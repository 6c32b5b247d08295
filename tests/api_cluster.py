"""A real API server with one agentless node, for the tests that drive the controllers
through the API without running pods: `gpushare node add box` registers the node (pods are
bound, never run), and optionally a queue is created. Shared by the controllers' and the
end-to-end tests."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpushare.cli.compose import api_server
from gpushare.kube.client import EVENTS, PODS, KubeClient

QUEUES = "/apis/scheduling.run.ai/v2/queues"
NODE = "box"


@contextmanager
def node_cluster(root: Path, gpus: str, queue: dict[str, Any] | None = None,
                 ) -> Iterator[tuple[KubeClient, str]]:
    """(client, kubeconfig path) of a server under `root` with node `box` of `gpus` (as
    `--gpus` takes them, e.g. ``2xH100``) and `queue`, if given."""
    server = api_server(root / "data", "127.0.0.1", 0)
    server.start()
    kubeconfig = str(server.write_kubeconfig(root / "admin.kubeconfig"))
    client = KubeClient.from_kubeconfig(kubeconfig)
    try:
        add_node(kubeconfig, gpus)
        if queue is not None:
            client.create(QUEUES, queue)
        yield client, kubeconfig
    finally:
        client.close()
        server.stop()


def add_node(kubeconfig: str, gpus: str) -> None:
    added = subprocess.run([sys.executable, "-m", "gpushare.cli.main", "node", "add", NODE,
                            "--gpus", gpus, "--no-taint", "--kubeconfig", kubeconfig],
                           capture_output=True, text=True, timeout=60)
    assert added.returncode == 0, added.stderr


def gpu_pod(name: str, gpu: str, *, queue: str = "team", group: str | None = None,
            grace_s: int | None = None) -> dict[str, Any]:
    """A pod of `queue` for the gpushare scheduler asking for `gpu`: ``"1"`` a whole GPU
    (``nvidia.com/gpu``), anything else a fraction (the ``gpu-fraction`` annotation)."""
    container: dict[str, Any] = {"name": "main", "image": "busybox"}
    annotations = {"pod-group-name": group} if group else {}
    if gpu == "1":
        container["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    else:
        annotations["gpu-fraction"] = gpu
    spec: dict[str, Any] = {"schedulerName": "gpushare", "containers": [container]}
    if grace_s is not None:
        spec["terminationGracePeriodSeconds"] = grace_s
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "annotations": annotations,
                         "labels": {"kai.scheduler/queue": queue}},
            "spec": spec}


def bound_node(client: KubeClient, name: str) -> str | None:
    return ((client.get(PODS.item(name, "default")) or {}).get("spec") or {}).get("nodeName")


def events(client: KubeClient, name: str, reason: str) -> list[dict[str, Any]]:
    """The Events in `default` about object `name` with `reason`."""
    return [e for e in client.list(EVENTS.collection("default"))["items"]
            if e["involvedObject"]["name"] == name and e.get("reason") == reason]
