"""Pod limits through the API with a real `gpushare agent` process: the Node condition, an
OOMKilled container as `kubectl get pod` shows it, no cgroup left after many pods, a node
without cgroups refusing a tenant's pod, eviction for local storage and disk pressure."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_agent_e2e import NS, Cluster, wait_for

from gpushare.agent.runtime import cgroups as cg
from gpushare.kube.client import EVENTS, NODES, PODS


class LimitsCluster(Cluster):
    node = "limits-node"

    def start_agent_with(self, *extra: str) -> None:
        self.agent = subprocess.Popen(
            [sys.executable, "-m", "gpushare.cli.main", "agent", "--kubeconfig",
             str(self.kubeconfig), "--node-name", self.node, "--gpus", "1xL40S",
             "--data-dir", str(self.root / "agent"), "--heartbeat", "0.5",
             "--restart-backoff", "0.2", "--pod-pids-limit", "64", "--storage-check", "0.5",
             *extra],
            stdout=open(self.root / "agent.log", "ab"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
        )
        wait_for(lambda: self.condition("PodLimits") is not None, 30)

    def condition(self, kind: str) -> dict[str, Any] | None:
        node = self.kube.get(NODES.item(self.node)) or {}
        return next((c for c in (node.get("status") or {}).get("conditions") or []
                     if c.get("type") == kind), None)

    def create_raw(self, body: dict[str, Any]) -> None:
        self.kube.create(PODS.collection(NS), body)

    def create(self, name: str, command: list[str], limits: dict[str, str] | None = None,
               restart: str = "Never", labels: dict[str, str] | None = None) -> None:
        container: dict[str, Any] = {"name": "main", "image": "busybox", "command": command}
        if limits:
            container["resources"] = {"limits": limits}
        self.kube.create(PODS.collection(NS), {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": labels or {}},
            "spec": {"nodeName": self.node, "restartPolicy": restart,
                     "terminationGracePeriodSeconds": 1, "containers": [container]}})


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LimitsCluster]:
    c = LimitsCluster(tmp_path_factory.mktemp("limits-e2e"))
    c.start_agent_with()
    yield c
    if c.agent is not None:
        c.kill_agent(signal.SIGTERM)
    c.server.stop()


def _node_root(cluster: LimitsCluster) -> Path:
    """The node's memory cgroup, found from the agent process's own."""
    assert cluster.agent is not None
    own = Path(f"/proc/{cluster.agent.pid}/cgroup").read_text()
    path = next(line.split(":", 2)[2] for line in own.splitlines()
                if line.split(":")[1] == "memory")
    parent = cg.node_parent((cluster.root / "agent").resolve())
    return Path("/sys/fs/cgroup/memory" + path.rstrip("/")) / parent


def test_the_node_says_pods_get_cgroup_limits(cluster: LimitsCluster) -> None:
    condition = cluster.condition("PodLimits")
    assert condition is not None and condition["status"] == "True"
    assert condition["reason"] == "Cgroups" and "pids 64 per pod" in condition["message"]


def test_a_container_over_its_memory_limit_ends_oomkilled(cluster: LimitsCluster) -> None:
    cluster.create("hog", [sys.executable, "-c", "x = bytearray(512 * 1024 * 1024)"],
                   {"memory": "48Mi"})
    pod = cluster.wait_phase("hog", "Failed", timeout=30)
    state = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (state["reason"], state["exitCode"]) == ("OOMKilled", 137)
    got = kubectl(cluster, "get", "pod", "hog", "-o",
                  "jsonpath={.status.containerStatuses[0].state.terminated.reason}")
    assert got.stdout == "OOMKilled"
    events = cluster.kube.list(EVENTS.collection(NS))["items"]
    assert any(e["reason"] == "OOMKilling" and e["involvedObject"]["name"] == "hog"
               for e in events)


def test_no_cgroup_is_left_after_many_pods(cluster: LimitsCluster) -> None:
    root = _node_root(cluster)
    names = [f"short-{i}" for i in range(8)]
    for name in names:
        cluster.create(name, ["/bin/sh", "-c", "sleep 30 & echo started; wait"],
                       {"memory": "64Mi", "cpu": "100m"})
    for name in names:
        cluster.wait_phase(name, "Running", timeout=30)
    wait_for(lambda: sum(1 for p in root.iterdir() if p.name.startswith("pod-")) >= 8, 10)
    for name in names:
        cluster.kube.delete(PODS.item(name, NS))
    for name in names:
        wait_for(lambda n=name: cluster.pod(n) is None, 30)
    wait_for(lambda: not [p for p in root.iterdir() if p.name.startswith("pod-")
                          and p.name != "pod-" + (cluster.pod("hog") or {}).get(
                              "metadata", {}).get("uid", "")], 20)
    left = [p for p in root.iterdir() if p.is_dir()]
    assert all(p.name.startswith("pod-") for p in left)  # at most the finished "hog"
    assert kubectl(cluster, "get", "pods").returncode == 0


def kubectl(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["/usr/bin/kubectl", *args], capture_output=True, text=True,
                          env=dict(os.environ, KUBECONFIG=str(cluster.kubeconfig)),
                          timeout=30, check=False)


def test_without_cgroups_a_tenants_pod_is_refused_and_the_node_says_why(
        tmp_path: Path) -> None:
    c = LimitsCluster(tmp_path)
    c.node = "no-limits-node"
    try:
        c.start_agent_with("--cgroups", "none")
        condition = c.condition("PodLimits")
        assert condition is not None and condition["status"] == "False"
        assert condition["reason"] == "NoCgroups" and "--cgroups none" in condition["message"]
        c.create("tenant", ["sleep", "60"],
                 labels={"tenancy.gpushare.io/tenant": "team-a"})
        c.create("limited", ["sleep", "60"], {"memory": "64Mi"})
        c.create("plain", ["sleep", "60"])
        for name in ("tenant", "limited"):
            pod = c.wait_phase(name, "Failed", timeout=20)
            assert pod["status"]["reason"] == "LimitsUnavailable"
        assert "resources.limits.memory" in c.pod("limited")["status"]["message"]
        c.wait_phase("plain", "Running", timeout=20)
    finally:
        if c.agent is not None:
            c.kill_agent(signal.SIGTERM)
        c.server.stop()


def test_a_pod_past_its_ephemeral_storage_limit_is_evicted(cluster: LimitsCluster) -> None:
    cluster.create("filler", ["/bin/sh", "-c",
                              "head -c 4194304 /dev/zero > blob; sleep 60"],
                   {"ephemeral-storage": "1Mi"})
    pod = cluster.wait_phase("filler", "Failed", timeout=30)
    assert pod["status"]["reason"] == "Evicted"
    assert pod["status"]["message"] == (
        "Pod ephemeral local storage usage exceeds the total limit of containers 1Mi. ")
    events = cluster.kube.list(EVENTS.collection(NS))["items"]
    assert any(e["reason"] == "Evicted" and e["involvedObject"]["name"] == "filler"
               for e in events)


def test_under_disk_pressure_the_node_is_tainted_and_the_biggest_pod_evicted(
        tmp_path: Path) -> None:
    c = LimitsCluster(tmp_path)
    c.node = "pressure-node"
    try:
        # every file system is under a 100 % free threshold: the node is under pressure
        c.start_agent_with("--disk-min-free", "100%")
        c.create("big", ["/bin/sh", "-c", "head -c 2097152 /dev/zero > blob; sleep 60"])
        pod = c.wait_phase("big", "Failed", timeout=30)
        assert pod["status"]["reason"] == "Evicted"
        assert pod["status"]["message"].startswith(
            "The node was low on resource: ephemeral-storage. Threshold quantity: ")
        node = wait_for(lambda: (n := c.kube.get(NODES.item(c.node))) and any(
            t["key"] == "node.kubernetes.io/disk-pressure" for t in
            (n.get("spec") or {}).get("taints") or []) and n, 20)
        assert {"key": "node.kubernetes.io/disk-pressure", "effect": "NoSchedule"} in [
            {k: t[k] for k in ("key", "effect")} for t in node["spec"]["taints"]]
        condition = wait_for(lambda: (x := c.condition("DiskPressure")) and
                             x["status"] == "True" and x, 20)
        assert condition["reason"] == "KubeletHasDiskPressure"
    finally:
        if c.agent is not None:
            c.kill_agent(signal.SIGTERM)
        c.server.stop()
