"""The agent's own figures over a FAKE NVML (no GPU here): slots held and portion booked
per GPU, GPU memory as NVML reports it, watchdog kills; and its measurements reaching
metrics.k8s.io with the pods' GPU memory."""

from __future__ import annotations

import time
from pathlib import Path

from fake_nvml import FakeNvml
from process_probes import processes_named

from gpushare.agent.agent import Agent, AgentConfig
from gpushare.agent.gpu.enforcement import Enforcement
from gpushare.agent.gpu.nvml import GpuProcess, probe_inventory
from gpushare.agent.node.inventory import host_resources
from gpushare.agent.runtime.supervisor import SupervisorConfig
from gpushare.cli.compose import api_server
from gpushare.kube.client import PODS, KubeClient

NODE = "metrics-gpu-node"
MIB = 1 << 20


def wait_for(check, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("condition not reached in time")


def test_agent_figures_over_a_fake_nvml(tmp_path: Path) -> None:
    server = api_server(tmp_path / "api").start()
    kube = KubeClient.from_kubeconfig(str(tmp_path / "api" / "admin.kubeconfig"))
    nvml = FakeNvml.with_gpus("2xH100", node=NODE)
    config = AgentConfig(node_name=NODE, data_dir=tmp_path / "agent", heartbeat_s=0.5,
                         monitor_s=3600, usage_report_s=0, telemetry_s=3600,
                         supervisor=SupervisorConfig(backoff_base_s=0.2))
    agent = Agent(kube, config, probe_inventory(nvml), host_resources(),
                  Enforcement(("nvml-watchdog",), "nvml-watchdog"), nvml)
    agent.start()
    m = agent.metrics.registry

    def value(name: str, **labels: str) -> float | None:
        return m.get_sample_value(name, labels)

    try:
        assert value("gpushare_node_enforcement_info", node=NODE, backend="nvml-watchdog") == 1
        assert value("gpushare_watchdog_kills_total", node=NODE) == 0
        share = {"gpushare.io/gpu-indices": "0", "gpushare.io/gpu-portion": "0.5",
                 "gpushare.io/gpu-memory-mib": "40000"}
        for name in ("tenant", "neighbour"):
            kube.create(PODS.collection("default"), {
                "metadata": {"name": name, "annotations": share},
                "spec": {"nodeName": NODE, "restartPolicy": "Always",
                         "containers": [{"name": "main", "image": "x",
                                         "command": ["sh", "-c", "sleep 300 & wait"]}]}})
        wait_for(lambda: len(agent.pods()) == 2
                 and all(s.process_groups() for s in agent.pods().values()))
        pids = {key: wait_for(lambda s=sup: processes_named("sleep", s.process_groups()[0]))[0]
                for key, sup in agent.pods().items()}
        nvml.processes[0] = [GpuProcess(pids["default/tenant"], 10_000 * MIB),
                             GpuProcess(pids["default/neighbour"], 5_000 * MIB)]
        assert agent.monitor_once() == []
        report = agent.telemetry.once()  # type: ignore[union-attr]
        assert value("gpushare_gpu_slots_held", node=NODE, gpu="0") == 2
        assert value("gpushare_gpu_slots_held", node=NODE, gpu="1") == 0
        assert value("gpushare_gpu_allocated_portion", node=NODE, gpu="0") == 1.0
        assert value("gpushare_gpu_memory_used_bytes", node=NODE, gpu="0") == 15_000 * MIB
        assert value("gpushare_pod_gpu_memory_used_bytes", namespace="default", pod="tenant",
                     gpu="0") == 10_000 * MIB
        assert value("gpushare_node_pods_running", node=NODE) == 2
        pods = {p["name"]: p for p in report["pods"]}  # type: ignore[index]
        assert pods["tenant"]["containers"][0]["gpuMemory"] == 10_000 * MIB
        listed = kube.list("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods")["items"]
        usage = {p["metadata"]["name"]: p["containers"][0]["usage"] for p in listed}
        assert usage["tenant"]["nvidia.com/gpu-memory"] == f"{10_000 * 1024}Ki"
        assert kube.list("/apis/metrics.k8s.io/v1beta1/nodes")["items"][0]["metadata"][
            "name"] == NODE

        nvml.processes[0][0] = GpuProcess(pids["default/tenant"], 60_000 * MIB)
        assert agent.monitor_once() == ["default/tenant"]
        assert value("gpushare_watchdog_kills_total", node=NODE) == 1
        wait_for(lambda: (p := kube.get(PODS.item("tenant", "default")))
                 and p["status"].get("phase") == "Failed")
        agent.telemetry.once()  # type: ignore[union-attr]
        assert value("gpushare_gpu_slots_held", node=NODE, gpu="0") == 1
        assert value("gpushare_pod_cpu_usage_cores", namespace="default", pod="tenant") is None
    finally:
        agent.stop(stop_pods=True)
        kube.close()
        server.stop()
