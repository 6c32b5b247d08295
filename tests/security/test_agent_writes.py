"""The agent's writes about its pods: it may annotate the pods bound to it (its
`gpushare.io/sandbox` isolation record, which its role used to refuse, so each pod's write
was retried in front of every other pod's status), and nothing more of them."""

from __future__ import annotations

import json

from tenancy_support import Kubectl, Platform

from waiting import wait_for

QUEUE = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: writes}
spec:
  resources:
    gpu: {quota: 1, limit: -1, overQuotaWeight: 1}
    cpu: {quota: -1, limit: -1, overQuotaWeight: 1}
    memory: {quota: -1, limit: -1, overQuotaWeight: 1}
"""


def test_the_agent_records_each_pods_isolation_and_changes_nothing_else(
        platform: Platform) -> None:
    platform.host.apply(QUEUE)
    platform.host.apply(json.dumps({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "recorded", "namespace": "default",
                     "labels": {"kai.scheduler/queue": "writes"}},
        "spec": {"schedulerName": "gpushare", "restartPolicy": "Never",
                 "containers": [{"name": "c", "image": "python",
                                 "command": ["sleep", "3600"]}]}}))
    annotation = wait_for(lambda: (platform.host.json("get", "pod", "recorded")["metadata"]
                                   .get("annotations") or {}).get("gpushare.io/sandbox"),
                          60, "the pod's gpushare.io/sandbox annotation")
    assert annotation.startswith("bwrap: uid "), annotation
    agent = Kubectl(platform.data / "agent.kubeconfig")
    agent.run("annotate", "pod", "recorded", "security.test/seen=yes")
    for args in (("label", "pod", "recorded", "kai.scheduler/queue=other", "--overwrite"),
                 ("patch", "pod", "recorded", "--type=merge", "-p",
                  json.dumps({"spec": {"activeDeadlineSeconds": 1}}))):
        done = agent.run(*args, check=False)
        assert done.returncode != 0 and "forbidden" in done.stderr.lower(), done.stderr
    platform.host.run("delete", "pod", "recorded", "--wait=false")
