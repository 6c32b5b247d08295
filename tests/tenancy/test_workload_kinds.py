"""StatefulSets, CronJobs and DaemonSets run, on a real `gpushare up` (its agent runs the
pods, so readiness is real), in the host cluster and, for StatefulSets and CronJobs,
inside a tenant."""

from __future__ import annotations

import re

import pytest
from tenancy_support import Kubectl, Platform, wait_for


def statefulset(queue: str) -> str:
    return f"""
apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: web, namespace: default}}
spec:
  replicas: 2
  serviceName: web
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web, kai.scheduler/queue: {queue}}}}}
    spec:
      schedulerName: gpushare
      containers:
      - name: main
        image: python
        command: ["python3", "-c", "import time; time.sleep(3600)"]
"""


CRONJOB = """
apiVersion: batch/v1
kind: CronJob
metadata: {name: tick, namespace: default}
spec:
  schedule: "* * * * *"
  successfulJobsHistoryLimit: 1
  jobTemplate:
    metadata: {labels: {kai.scheduler/queue: %(queue)s}}
    spec:
      template:
        metadata: {labels: {kai.scheduler/queue: %(queue)s}}
        spec:
          schedulerName: gpushare
          restartPolicy: Never
          containers:
          - {name: main, image: python, command: ["python3", "-c", "print('tick')"]}
"""

DAEMONSET = """
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: probe, namespace: default}
spec:
  selector: {matchLabels: {app: probe}}
  template:
    metadata: {labels: {app: probe}}
    spec:
      %(tolerations)s
      containers:
      - name: main
        image: python
        command: ["python3", "-c", "import time; time.sleep(3600)"]
"""


def _pods(k: Kubectl, selector: str) -> dict[str, dict]:
    return {p["metadata"]["name"]: p for p in k.json("get", "pods", "-l", selector)["items"]
            if not p["metadata"].get("deletionTimestamp")}


def _ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in pod.get("status", {}).get("conditions", []))


def _run_statefulset(k: Kubectl, queue: str) -> None:
    k.apply(statefulset(queue))
    # OrderedReady: web-1 only once web-0 runs and is Ready
    first = wait_for(lambda: _pods(k, "app=web"), 60, "web-0 created")
    assert set(first) == {"web-0"} or _ready(first["web-0"]), first.keys()
    pods = wait_for(lambda: (lambda p: p if len(p) == 2 and all(map(_ready, p.values()))
                             else None)(_pods(k, "app=web")), 120, "web-0 and web-1 Ready")
    assert set(pods) == {"web-0", "web-1"}
    created = {n: p["metadata"]["creationTimestamp"] for n, p in pods.items()}
    assert created["web-0"] <= created["web-1"]
    for name, pod in pods.items():
        assert pod["spec"]["hostname"] == name and pod["spec"]["subdomain"] == "web"
        assert pod["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"] == name
    assert re.split(r"\s{2,}", k.run("get", "sts", "web").stdout.splitlines()[1])[:2] == [
        "web", "2/2"]
    assert "roll out complete" in k.run("rollout", "status", "sts/web", "--timeout=60s").stdout
    # Scale down from the top; a deleted member comes back under its name.
    k.run("scale", "sts", "web", "--replicas=1")
    wait_for(lambda: set(_pods(k, "app=web")) == {"web-0"}, 60, "web-1 gone")
    uid = _pods(k, "app=web")["web-0"]["metadata"]["uid"]
    k.run("delete", "pod", "web-0", "--wait=false")
    wait_for(lambda: (lambda p: "web-0" in p and p["web-0"]["metadata"]["uid"] != uid)(
        _pods(k, "app=web")), 60, "web-0 back")
    k.run("delete", "sts", "web")


def _run_cronjob(k: Kubectl, queue: str) -> None:
    k.apply(CRONJOB % {"queue": queue})
    jobs = wait_for(lambda: k.json("get", "jobs")["items"], 90, "the minute's Job")
    assert re.fullmatch(r"tick-\d+", jobs[0]["metadata"]["name"])
    assert jobs[0]["metadata"]["ownerReferences"][0]["kind"] == "CronJob"
    wait_for(lambda: any(c["type"] == "Complete" and c["status"] == "True"
                         for j in k.json("get", "jobs")["items"]
                         for c in j.get("status", {}).get("conditions", [])), 90,
             "the Job complete")
    row = re.split(r"\s{2,}", k.run("get", "cronjob", "tick").stdout.splitlines()[1])
    assert row[:4] == ["tick", "* * * * *", "<none>", "False"] and row[5] != "<none>"
    k.run("patch", "cronjob", "tick", "--type=merge", "-p", '{"spec":{"suspend":true}}')
    k.run("delete", "cronjob", "tick")


def test_statefulset_in_the_host_cluster(platform: Platform) -> None:
    _run_statefulset(platform.host, "nlp")


def test_statefulset_inside_a_tenant(platform: Platform) -> None:
    _run_statefulset(platform.tenant("sts-team", "--queue", "nlp"), "nlp")


def test_cronjob_in_the_host_cluster(platform: Platform) -> None:
    _run_cronjob(platform.host, "vision")


def test_cronjob_inside_a_tenant(platform: Platform) -> None:
    _run_cronjob(platform.tenant("cron-team", "--queue", "vision"), "vision")


@pytest.mark.parametrize("tolerate", [False, True])
def test_daemonset_runs_on_agent_nodes_only_unless_tolerated(platform: Platform,
                                                             tolerate: bool) -> None:
    k = platform.host
    if "static-1" not in k.run("get", "nodes").stdout:
        platform.gpushare("node", "add", "static-1", "--gpus", "1xL4", "--kubeconfig",
                          str(platform.data / "admin.kubeconfig"))
    tolerations = ('tolerations: [{key: gpushare.io/no-agent, operator: Exists}]'
                   if tolerate else "")
    k.apply(DAEMONSET % {"tolerations": tolerations})
    want = {"box", "static-1"} if tolerate else {"box"}
    pods = wait_for(lambda: (lambda p: p if {x["spec"]["nodeName"] for x in p.values()} == want
                             else None)(_pods(k, "app=probe")), 60, f"a pod on {want}")
    assert len(pods) == len(want)
    on_box = next(p for p in pods.values() if p["spec"]["nodeName"] == "box")
    wait_for(lambda: _ready(k.json("get", "pod", on_box["metadata"]["name"])), 60,
             "the agent node's daemon pod Ready")
    wait_for(lambda: re.split(r"\s{2,}", k.run("get", "ds", "probe").stdout.splitlines()[1]
                              )[1:4] == [str(len(want))] * 2 + ["1"], 30,
             "the DaemonSet's columns")
    if not tolerate:
        assert "successfully rolled out" in k.run("rollout", "status", "ds/probe",
                                                  "--timeout=60s").stdout
    k.run("delete", "ds", "probe")
    wait_for(lambda: not _pods(k, "app=probe"), 60, "the daemon pods gone")


TENANT_PDB = """
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: keep-one, namespace: default}
spec:
  minAvailable: 1
  selector: {matchLabels: {team: x}}
"""


def test_eviction_inside_a_tenant_honours_its_budget(platform: Platform, tmp_path) -> None:
    from tenancy_support import pod_manifest

    tenant = platform.tenant("pdb-team", "--queue", "recsys")
    tenant.apply(pod_manifest("guarded", fraction="0.1"))
    wait_for(lambda: _ready(tenant.json("get", "pod", "guarded")), 90, "the pod Ready")
    tenant.apply(TENANT_PDB)
    status = wait_for(lambda: (lambda s: s if s.get("currentHealthy") == 1 else None)(
        tenant.json("get", "pdb", "keep-one").get("status", {})), 60,
        "the tenant's budget counted")
    assert status["disruptionsAllowed"] == 0
    eviction = tmp_path / "eviction.json"
    eviction.write_text('{"apiVersion": "policy/v1", "kind": "Eviction", '
                        '"metadata": {"name": "guarded", "namespace": "default"}}')
    refused = tenant.run("create", "--raw", "/api/v1/namespaces/default/pods/guarded/eviction",
                         "-f", str(eviction), check=False)
    assert refused.returncode != 0
    assert "Cannot evict pod as it would violate the pod's disruption budget." in \
        refused.stderr
    assert not tenant.json("get", "pod", "guarded")["metadata"].get("deletionTimestamp")
    tenant.run("delete", "pdb", "keep-one")
    tenant.run("create", "--raw", "/api/v1/namespaces/default/pods/guarded/eviction",
               "-f", str(eviction))
    wait_for(lambda: not platform.host.json("get", "pods", "-n", "vc-pdb-team")["items"], 90,
             "the evicted pod gone from the host")
