"""The three-team pattern end to end: queues, fractional pods, queue status."""

from __future__ import annotations

import subprocess
import sys

from e2e_support import add_node, wait_for

TEAMS = ("nlp", "vision", "recsys")

QUEUES = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata:
  name: ml-org
spec:
  resources:
    gpu: {quota: 1, limit: 1, overQuotaWeight: 1}
    cpu: {quota: -1, limit: -1, overQuotaWeight: 1}
    memory: {quota: -1, limit: -1, overQuotaWeight: 1}
""" + "".join(
    f"""---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata:
  name: {team}
spec:
  parentQueue: ml-org
  resources:
    gpu: {{quota: 0.33, limit: 1, overQuotaWeight: 1}}
    cpu: {{quota: -1, limit: -1, overQuotaWeight: 1}}
    memory: {{quota: -1, limit: -1, overQuotaWeight: 1}}
"""
    for team in TEAMS
)


def team_pod(team: str) -> str:
    return f"""---
apiVersion: v1
kind: Pod
metadata:
  name: {team}-notebook
  namespace: default
  labels: {{kai.scheduler/queue: {team}}}
  annotations: {{gpu-fraction: "0.33"}}
spec:
  schedulerName: gpushare
  containers:
  - name: main
    image: python:3.11
    command: ["sleep", "3600"]
"""


def test_three_teams_share_one_gpu_and_queues_show_330m(server, controllers, kubectl):
    add_node(server.kubeconfig, "gpu-node-1", "1xL40S")
    kubectl.run("apply", "-f", "-", stdin=QUEUES)
    kubectl.run("apply", "-f", "-", stdin="".join(team_pod(t) for t in TEAMS))

    def bound():
        pods = kubectl.json("get", "pods", "-n", "default")["items"]
        placed = {
            p["metadata"]["name"]: (
                p["spec"].get("nodeName"),
                (p["metadata"].get("annotations") or {}).get("gpushare.io/gpu-indices"),
                (p["metadata"].get("annotations") or {}).get("gpushare.io/gpu-portion"),
            )
            for p in pods
        }
        return placed if all(v[0] for v in placed.values()) and len(placed) == 3 else None

    placed = wait_for(bound, what="three pods bound")
    assert set(placed.values()) == {("gpu-node-1", "0", "0.33")}

    def allocated():
        queues = {q["metadata"]["name"]: q for q in kubectl.json("get", "queues")["items"]}
        got = {t: (queues[t].get("status") or {}).get("allocated", {}).get("nvidia.com/gpu")
               for t in TEAMS}
        return got if all(v == "330m" for v in got.values()) else None

    wait_for(allocated, what="queue status allocated 330m")
    table = kubectl.run("get", "queues").stdout
    for team in TEAMS:
        row = next(line for line in table.splitlines() if line.startswith(team))
        assert "330m" in row, table
    org = kubectl.json("get", "queue", "ml-org")
    assert org["status"]["allocated"]["nvidia.com/gpu"] == "990m"
    assert org["status"]["childQueues"] == sorted(TEAMS)
    groups = kubectl.json("get", "podgroups", "-n", "default")["items"]
    assert sorted(g["spec"]["queue"] for g in groups) == sorted(TEAMS)
    wait_for(lambda: all((g.get("status") or {}).get("phase") == "Running"
                         for g in kubectl.json("get", "podgroups", "-n", "default")["items"]),
             what="the PodGroups Running")
    assert "Running" in kubectl.run("get", "podgroups", "-n", "default").stdout


def test_queue_commands_build_the_tree_and_show_the_shares(server, controllers, kubectl):
    def gpushare(*args):
        done = subprocess.run([sys.executable, "-m", "gpushare.cli.main", *args,
                               "--kubeconfig", str(server.kubeconfig)],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    add_node(server.kubeconfig, "gpu-node-1", "1xL40S")
    gpushare("queue", "create", "ml-org", "--gpu", "1:1", "--cpu", "-1:-1", "--memory", "-1:-1")
    for team in TEAMS:
        gpushare("queue", "create", team, "--parent", "ml-org", "--gpu", "0.33:1:1")
    kubectl.run("apply", "-f", "-", stdin="".join(team_pod(t) for t in TEAMS))

    def table():
        text = gpushare("queue", "list")
        rows = {line.split()[0]: line for line in text.splitlines()[1:]}
        return text if all(rows.get(t, "").count("330m") >= 2 for t in TEAMS) else None

    text = wait_for(table, what="queue list showing 330m fair share and allocated")
    assert text.splitlines()[1].startswith("ml-org")
    assert all(line.startswith("  ") for line in text.splitlines()[2:])
