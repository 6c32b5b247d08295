"""Gangs from a tenant, pause/resume, and delete, on a node with four declared L40S."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tenancy_support import QUEUES, Kubectl, Platform, pod_manifest, start_platform, wait_for

GANG = """
apiVersion: batch/v1
kind: Job
metadata:
  name: gang
  namespace: default
  annotations: {kai.scheduler/batch-min-member: "4"}
spec:
  parallelism: 4
  completions: 4
  backoffLimit: 100
  template:
    spec:
      schedulerName: gpushare
      restartPolicy: Never
      containers:
      - name: worker
        image: python
        command: ["python3", "-c", "import time; time.sleep(3600)"]
        resources: {limits: {nvidia.com/gpu: "1"}}
"""

HOLDER = """
apiVersion: v1
kind: Pod
metadata:
  name: holder
  namespace: default
  labels: {kai.scheduler/queue: vision}
spec:
  schedulerName: gpushare
  containers:
  - name: main
    image: python
    command: ["python3", "-c", "import time; time.sleep(3600)"]
    resources: {limits: {nvidia.com/gpu: "1"}}
"""


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    root: Path = tmp_path_factory.mktemp("lifecycle")
    running = start_platform(root / "data", gpus="4xL40S")
    running.host.apply(QUEUES % {"gpus": 4, "quota": 1})
    yield running
    running.stop()


def _host_pods(platform: Platform, tenant: str) -> list[dict]:
    return platform.host.json("get", "pods", "-n", f"vc-{tenant}")["items"]


def _lasting_objects(platform: Platform, tenant: str) -> dict[str, str]:
    """The uids of a tenant's objects that only a deletion removes: its VirtualCluster and
    host namespace, and the namespaces and Jobs inside its cluster."""
    inside = Kubectl(platform.data / "tenants" / f"{tenant}.kubeconfig")
    objects = [platform.host.json("get", "virtualcluster", tenant),
               platform.host.json("get", "namespace", f"vc-{tenant}"),
               *inside.json("get", "namespaces")["items"],
               *inside.json("get", "jobs", "-A")["items"]]
    return {f"{o['kind']}/{o['metadata'].get('namespace', '')}/{o['metadata']['name']}":
            o["metadata"]["uid"] for o in objects}


def test_a_gang_from_a_tenant_is_gang_scheduled_on_the_host(big):
    host = big.host
    host.apply(HOLDER)  # one of the four GPUs is taken
    wait_for(lambda: host.json("get", "pod", "holder")["spec"].get("nodeName"), 60,
             "the holder bound")
    nlp = big.tenant("nlp", "--queue", "nlp")
    nlp.apply(GANG)
    wait_for(lambda: len(_host_pods(big, "nlp")) == 4, 60, "four host pods")
    groups = host.json("get", "podgroups", "-n", "vc-nlp")["items"]
    assert len(groups) == 1 and groups[0]["spec"]["minMember"] == 4
    assert groups[0]["spec"]["queue"] == "nlp"
    assert all(p["metadata"]["annotations"]["pod-group-name"] == groups[0]["metadata"]["name"]
               for p in _host_pods(big, "nlp"))
    assert all(not p["metadata"].get("ownerReferences") for p in _host_pods(big, "nlp"))
    wait_for(lambda: host.json("get", "events", "-n", "vc-nlp", "--field-selector",
                               "reason=Unschedulable")["items"], 30, "the gang reported pending")
    assert not any(p["spec"].get("nodeName") for p in _host_pods(big, "nlp")), \
        "part of the gang was bound while only 3 GPUs were free"
    # The tenant sees why its pods wait.
    wait_for(lambda: any(e["reason"] == "Unschedulable" for e in
                         nlp.json("get", "events")["items"]), 30, "events in the tenant")

    host.run("delete", "pod", "holder", "--grace-period=0", "--force")
    wait_for(lambda: sum(1 for p in _host_pods(big, "nlp") if p["spec"].get("nodeName")) == 4,
             60, "all four bound together")
    tenant_pods = wait_for(lambda: [p for p in nlp.json("get", "pods")["items"]
                                    if p["spec"].get("nodeName") == "box"] or None, 30,
                           "the tenant pods bound")
    assert len(wait_for(lambda: [p for p in nlp.json("get", "pods")["items"]
                                 if p["spec"].get("nodeName")] if len(
        [p for p in nlp.json("get", "pods")["items"] if p["spec"].get("nodeName")]) == 4
        else None, 30, "four tenant pods bound")) == 4
    assert tenant_pods


def test_pause_takes_pods_off_the_host_and_resume_brings_them_back(big):
    vision = big.tenant("vision", "--queue", "vision")
    vision.apply(pod_manifest("solo", fraction="0.5"))
    wait_for(lambda: [p for p in _host_pods(big, "vision") if p["spec"].get("nodeName")], 60,
             "vision's pod bound on the host")
    big.gpushare("tenant", "pause", "vision", "--data-dir", str(big.data))
    wait_for(lambda: not _host_pods(big, "vision"), 60, "host pods gone while paused")
    pod = wait_for(lambda: vision.json("get", "pods")["items"], 30, "the pod kept in the tenant")
    assert [p["metadata"]["name"] for p in pod] == ["solo"]
    wait_for(lambda: any(c.get("reason") == "VirtualClusterPaused" for c in
                         vision.json("get", "pod", "solo")["status"].get("conditions") or ()),
             30, "the pod says why it waits")
    assert not vision.json("get", "pod", "solo")["spec"].get("nodeName")
    assert big.host.json("get", "virtualcluster", "vision")["status"]["phase"] == "Paused"
    big.gpushare("tenant", "resume", "vision", "--data-dir", str(big.data))
    wait_for(lambda: [p for p in _host_pods(big, "vision") if p["spec"].get("nodeName")], 60,
             "back on the host after resume")
    wait_for(lambda: vision.json("get", "pod", "solo")["spec"].get("nodeName"), 30,
             "bound again in the tenant")


def test_delete_removes_everything_of_the_tenant_and_nothing_else(big):
    recsys = big.tenant("recsys", "--queue", "recsys")
    recsys.run("create", "namespace", "work")
    recsys.run("create", "configmap", "cfg", "-n", "work", "--from-literal=a=1")
    manifest = pod_manifest("uses-cfg").replace("  namespace: default", "  namespace: work")
    manifest = manifest.replace("    image: python", "    image: python\n    env: [{name: A, "
                                "valueFrom: {configMapKeyRef: {name: cfg, key: a}}}]")
    recsys.apply(manifest)
    wait_for(lambda: _host_pods(big, "recsys"), 60, "recsys host pod")
    assert big.host.json("get", "configmaps", "-n", "vc-recsys", "-l",
                         "tenancy.gpushare.io/tenant=recsys")["items"]
    others = {t: _lasting_objects(big, t) for t in ("nlp", "vision")}
    big.gpushare("tenant", "delete", "recsys", "--data-dir", str(big.data))
    assert big.host.run("get", "namespace", "vc-recsys", check=False).returncode != 0
    assert big.host.run("get", "virtualcluster", "recsys", check=False).returncode != 0
    # Its token is revoked, and its cluster is empty.
    assert recsys.run("get", "pods", check=False).returncode != 0
    admin = Kubectl(big.data / "admin.kubeconfig")
    server = admin.json("config", "view", "--minify")["clusters"][0]["cluster"]["server"]
    assert admin.json("--server", f"{server}/clusters/recsys", "get", "pods", "-A")["items"] == []
    assert admin.json("--server", f"{server}/clusters/recsys", "get", "namespaces")["items"] == []
    # Nothing of the others was removed or replaced: their VirtualClusters, host namespaces,
    # and the namespaces and workloads inside their clusters keep their uids, and they still
    # have pods on the host. (Their host pods themselves may change meanwhile: the scheduler
    # reclaims and their Jobs make new pods.)
    assert {t: _lasting_objects(big, t) for t in others} == others
    assert all(_host_pods(big, t) for t in others)
