"""Pods under the supervisor with real cgroups and the real log writer: OOMKilled, the pids
limit, CPU usage read from the cgroup, the log cap, nothing left behind."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from test_agent_runtime import FAST, NoValues, Recorder, main_state, wait_for

from gpushare.agent.pods.podspec import plan_container
from gpushare.agent.runtime import cgroups as cg
from gpushare.agent.runtime.logshim import LogLimits
from gpushare.agent.runtime.podlimits import PodLimits
from gpushare.agent.runtime.supervisor import PodSupervisor, SupervisorConfig
from gpushare.agent.runtime.telemetry import ContainerGroup, ProcessSampler

PY = sys.executable


@pytest.fixture()
def node(tmp_path: Path):
    cgroups = cg.Cgroups(cg.detect(), cg.node_parent(tmp_path / "node"))
    cgroups.ensure_root()
    yield cgroups
    assert cg.remove(cgroups.root)


def _pod(containers: list[dict], restart: str = "Never") -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "t", "uid": uuid.uuid4().hex},
            "spec": {"nodeName": "n", "restartPolicy": restart, "containers": containers}}


def _supervise(pod: dict, directory: Path, limits: PodLimits | None,
               config: SupervisorConfig = FAST) -> tuple[PodSupervisor, Recorder]:
    recorder = Recorder()

    def planner(container: dict, init: bool):
        return plan_container(pod, container, "spec.containers[0]",
                              {"PATH": os.environ["PATH"]}, {}, NoValues(), init)

    sup = PodSupervisor(pod, directory, planner, recorder, config, None, limits)
    sup.start()
    return sup, recorder


def test_over_its_memory_limit_the_container_is_oom_killed_and_restarted(
        node: cg.Cgroups, tmp_path: Path) -> None:
    hog = {"name": "hog", "resources": {"limits": {"memory": "48Mi"}},
           "command": [PY, "-c", "x = bytearray(512 * 1024 * 1024); print('survived')"]}
    pod = _pod([hog], restart="OnFailure")
    limits = PodLimits(node, pod, 64, tmp_path)
    sup, recorder = _supervise(pod, tmp_path, limits)
    try:
        status = wait_for(lambda: (s := main_state(recorder)) and s["restartCount"] >= 1
                          and "terminated" in s.get("lastState", {}) and s, 30)
        last = status["lastState"]["terminated"]
        assert (last["reason"], last["exitCode"]) == ("OOMKilled", 137)
        assert any(r == "OOMKilling" and "hog" in m for r, m in recorder.events)
        assert any(r == "BackOff" for r, _ in recorder.events)
    finally:
        sup.stop(0)
        sup.wait(20)
    assert limits.remove()


def test_a_fork_loop_stops_at_the_pods_pids_limit(node: cg.Cgroups, tmp_path: Path) -> None:
    bomb = {"name": "bomb", "command": ["/bin/sh", "-c",
                                        "i=0; while [ $i -lt 200 ]; do sleep 60 & "
                                        "i=$((i+1)); done; wait"]}
    pod = _pod([bomb])
    limits = PodLimits(node, pod, 32, tmp_path)
    sup, _recorder = _supervise(pod, tmp_path, limits)
    try:
        wait_for(lambda: len(limits.container_cgroup("bomb").pids()) >= 20, 20)
        events = Path(limits.cgroup.paths["pids"], "pids.events")
        child = Path(limits.container_cgroup("bomb").paths["pids"], "pids.events")
        wait_for(lambda: int(events.read_text().split()[1]) + int(child.read_text().split()[1])
                 > 0, 20)
        assert len(limits.container_cgroup("bomb").pids()) <= 32
        assert os.system("true") == 0  # the node still starts processes
    finally:
        sup.stop(0)
        sup.wait(20)
    assert limits.remove()
    assert not limits.cgroup.exists()


def test_cpu_usage_comes_from_the_cgroup(node: cg.Cgroups, tmp_path: Path) -> None:
    spin = {"name": "spin", "resources": {"limits": {"cpu": "200m"}},
            "command": [PY, "-c", "while True: pass"]}
    pod = _pod([spin])
    limits = PodLimits(node, pod, None, tmp_path)
    sup, _ = _supervise(pod, tmp_path, limits)
    try:
        wait_for(lambda: sup.container_groups(), 10)
        pgid = sup.container_groups()[0][1]
        group = ContainerGroup("t/p", "spin", pgid, limits.container_cgroup("spin"))
        sampler = ProcessSampler()
        sampler.sample([group])
        wait_for(lambda: (limits.container_cgroup("spin").cpu_seconds() or 0) > 0.3, 20)
        usage = sampler.sample([group])[("t/p", "spin")]
        # under a 200m quota the rate stays near 0.2 (loose: the machine is shared)
        assert 0 < usage.cpu_cores < 0.5
        assert usage.memory_bytes > 0
        throttled = Path(limits.container_cgroup("spin").paths["cpu"], "cpu.stat").read_text()
        assert int(dict(line.split() for line in throttled.splitlines())["nr_throttled"]) > 0
    finally:
        sup.stop(0)
        sup.wait(20)
    assert limits.remove()


def _log_bytes(logs: Path) -> int:
    """The bytes of the log files now; a file rotated away between the listing and its
    size (the writer rotates while `yes` runs) is read again from a fresh listing."""
    while True:
        try:
            return sum(p.stat().st_size for p in logs.iterdir() if ".log" in p.name)
        except FileNotFoundError:
            continue


def test_yes_leaves_at_most_the_log_cap_on_disk(tmp_path: Path) -> None:
    config = SupervisorConfig(backoff_base_s=0.1, backoff_max_s=0.4, poll_s=0.05,
                              default_grace_s=5,
                              log_limits=LogLimits(max_size=256 * 1024, max_files=3))
    yes = {"name": "yes", "command": ["/bin/sh", "-c", "yes > /dev/stdout"]}
    pod = _pod([yes])
    sup, _ = _supervise(pod, tmp_path, None, config)
    logs = tmp_path / ".gpushare" / "logs" / "yes"
    try:
        wait_for(lambda: (logs / "0.log.2").exists(), 30)
        wait_for(lambda: (logs / "0.log.2").stat().st_size == 256 * 1024, 10)
        for _ in range(5):
            assert _log_bytes(logs) <= 3 * 256 * 1024
    finally:
        sup.stop(0)
        sup.wait(20)
    assert not (logs / "0.log.3").exists()
