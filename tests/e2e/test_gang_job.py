"""A gang Job waits for all its GPUs, then starts whole; kubectl create job works."""

from __future__ import annotations

from e2e_support import add_node, wait_for

QUEUE = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata:
  name: research
spec:
  resources:
    gpu: {quota: 4, limit: -1, overQuotaWeight: 1}
    cpu: {quota: -1, limit: -1, overQuotaWeight: 1}
    memory: {quota: -1, limit: -1, overQuotaWeight: 1}
"""

HOLDER = """
apiVersion: v1
kind: Pod
metadata:
  name: holder
  namespace: default
  labels: {kai.scheduler/queue: research}
spec:
  schedulerName: gpushare
  containers:
  - name: main
    image: python:3.11
    command: ["sleep", "3600"]
    resources: {limits: {nvidia.com/gpu: "1"}}
"""

GANG = """
apiVersion: batch/v1
kind: Job
metadata:
  name: gang
  namespace: default
  labels: {kai.scheduler/queue: research}
  annotations: {kai.scheduler/batch-min-member: "4"}
spec:
  parallelism: 4
  completions: 4
  template:
    spec:
      schedulerName: gpushare
      restartPolicy: Never
      containers:
      - name: worker
        image: python:3.11
        command: ["python", "-c", "print('step')"]
        resources: {limits: {nvidia.com/gpu: "1"}}
"""


def _gang_pods(kubectl):
    return kubectl.json("get", "pods", "-n", "default", "-l", "job-name=gang")["items"]


def test_gang_of_four_waits_for_the_fourth_gpu_then_binds_together(server, controllers, kubectl):
    add_node(server.kubeconfig, "box", "4xH100")
    kubectl.run("apply", "-f", "-", stdin=QUEUE)
    kubectl.run("apply", "-f", "-", stdin=HOLDER)
    wait_for(lambda: kubectl.json("get", "pod", "holder", "-n", "default")["spec"].get("nodeName"),
             what="holder bound")
    kubectl.run("apply", "-f", "-", stdin=GANG)
    pods = wait_for(lambda: (p := _gang_pods(kubectl)) and len(p) == 4 and p,
                    what="the Job's four pods")
    for pod in pods:
        owner = pod["metadata"]["ownerReferences"][0]
        assert owner["kind"] == "Job" and owner["controller"] is True

    group = wait_for(
        lambda: [g for g in kubectl.json("get", "podgroups", "-n", "default")["items"]
                 if g["spec"]["minMember"] == 4],
        what="the gang's PodGroup",
    )[0]
    assert group["metadata"]["ownerReferences"][0]["kind"] == "Job"

    # The scheduler has looked at the gang and said why it waits.
    def unschedulable():
        events = kubectl.json("get", "events", "-n", "default")["items"]
        return [e for e in events if e.get("reason") == "Unschedulable"
                and e["involvedObject"]["name"].startswith("gang-")]

    wait_for(unschedulable, what="an Unschedulable event for the gang")
    assert not [p for p in _gang_pods(kubectl) if p["spec"].get("nodeName")]

    kubectl.run("delete", "pod", "holder", "-n", "default", "--wait=false")

    def all_bound():
        pods = _gang_pods(kubectl)
        nodes = [p["spec"].get("nodeName") for p in pods]
        return pods if len(pods) == 4 and all(nodes) else None

    pods = wait_for(all_bound, what="the gang bound")
    indices = sorted(p["metadata"]["annotations"]["gpushare.io/gpu-indices"] for p in pods)
    assert indices == ["0", "1", "2", "3"]
    jobs = kubectl.run("get", "jobs", "-n", "default").stdout
    assert "gang" in jobs


def test_kubectl_create_job_runs_pods_and_reports_status(server, controllers, kubectl):
    add_node(server.kubeconfig, "box", "1xL40S")
    kubectl.run("create", "job", "hello", "--image=busybox", "--", "echo", "hi")
    job = wait_for(
        lambda: (j := kubectl.json("get", "job", "hello", "-n", "default")).get("status", {})
        .get("active") == 1 and j,
        what="job status active=1",
    )
    assert job["status"]["startTime"]
    pods = kubectl.json("get", "pods", "-n", "default", "-l", "job-name=hello")["items"]
    assert len(pods) == 1
    # Only the pod-grouper's default queue exists if the server created it; either way
    # the pod belongs to a PodGroup owned by the Job.
    wait_for(lambda: kubectl.json("get", "pod", pods[0]["metadata"]["name"], "-n", "default")
             ["metadata"].get("annotations", {}).get("pod-group-name"), what="pod grouped")
    # A finished pod completes the Job (the agent would write this; here we do).
    name = pods[0]["metadata"]["name"]
    kubectl.run("patch", "pod", name, "-n", "default", "--subresource=status", "--type=merge",
                "-p", '{"status": {"phase": "Succeeded"}}')
    done = wait_for(
        lambda: [c for c in (kubectl.json("get", "job", "hello", "-n", "default")
                             .get("status", {}).get("conditions") or [])
                 if c["type"] == "Complete" and c["status"] == "True"],
        what="job Complete",
    )
    assert done
    table = kubectl.run("get", "jobs", "-n", "default").stdout
    assert "hello" in table and "1/1" in table
