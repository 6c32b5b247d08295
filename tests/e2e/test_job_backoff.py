"""Job retries back off as kube-controller-manager's do: the pod replacing the first
failure comes 10 s after it, the next 20 s after the second, and backoffLimit ends it."""

from __future__ import annotations

import datetime as dt
import json

from e2e_support import add_node, wait_for

JOB = """
apiVersion: batch/v1
kind: Job
metadata: {name: flaky, namespace: default}
spec:
  backoffLimit: 2
  template:
    spec:
      schedulerName: gpushare
      restartPolicy: Never
      containers:
      - {name: main, image: busybox, command: ["false"]}
"""


def _pods(kubectl):
    items = kubectl.json("get", "pods", "-l", "job-name=flaky")["items"]
    return sorted(items, key=lambda p: p["metadata"]["creationTimestamp"])


def _fail(kubectl, name: str) -> float:
    """Play the node's part: the pod's container exited 1 now."""
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    status = {"status": {"phase": "Failed", "containerStatuses": [{
        "name": "main", "ready": False, "restartCount": 0, "image": "busybox", "imageID": "",
        "state": {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": stamp,
                                 "finishedAt": stamp}}}]}}
    kubectl.run("patch", "pod", name, "--subresource=status", "--type=merge",
                "-p", json.dumps(status))
    return now.timestamp()


def _created(pod) -> float:
    return dt.datetime.fromisoformat(pod["metadata"]["creationTimestamp"]
                                     .replace("Z", "+00:00")).timestamp()


def test_job_retries_back_off_10s_then_20s_and_stop_at_the_limit(server, controllers,
                                                                  kubectl):
    add_node(server.kubeconfig, "box", "1xL40S")
    kubectl.run("apply", "-f", "-", stdin=JOB)
    first = wait_for(lambda: _pods(kubectl), what="the first pod")[0]
    failed_at = _fail(kubectl, first["metadata"]["name"])
    second = wait_for(lambda: len(p := _pods(kubectl)) == 2 and p[1], timeout=30,
                      what="the second pod")
    assert _created(second) - failed_at >= 9, "replaced before the 10 s back-off"
    failed_at = _fail(kubectl, second["metadata"]["name"])
    third = wait_for(lambda: len(p := _pods(kubectl)) == 3 and p[2], timeout=45,
                     what="the third pod")
    assert _created(third) - failed_at >= 19, "replaced before the 20 s back-off"
    _fail(kubectl, third["metadata"]["name"])

    def failed_condition():
        status = kubectl.json("get", "job", "flaky").get("status") or {}
        return [c for c in status.get("conditions") or [] if c["type"] == "Failed"]

    condition = wait_for(failed_condition, what="the Job Failed")[0]
    assert condition["reason"] == "BackoffLimitExceeded"
    assert len(_pods(kubectl)) == 3
