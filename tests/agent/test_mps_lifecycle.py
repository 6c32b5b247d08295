"""MPS on a shared GPU: every stop path stops a pod's MPS clients by signals alone by default
(never `terminate_client`), and with `--mps-stop terminate-client` ends them with
`terminate_client` before any signal; server-side limits hold for a client that raises its
own, a fault stays on its GPU and is found, blamed and recovered from, and the compute
watchdog evicts a pod that escaped MPS.

There is no GPU here: `fake_mps/nvidia-cuda-mps-control` is a FAKE control daemon (named as
such) that records every command and emulates the server and client lists, limits and the
FAULT state; the clients are real processes (`fake_mps/cuda_client.py`) that the agent's
supervisor starts and stops.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_nvml import FakeNvml

from gpushare.agent.gpu.gpu_share import share_from_annotations
from gpushare.agent.gpu.mps import (
    STOP_SIGNAL,
    STOP_TERMINATE_CLIENT,
    MpsManager,
    MpsStopError,
    end_gpu_work,
    fault_clients,
    parse_pids,
    parse_status,
    server_limits,
)
from gpushare.agent.gpu.nvml import ProcessUtilization
from gpushare.agent.node.inventory import declared_gpus
from gpushare.agent.pods.podspec import plan_container
from gpushare.agent.runtime.gpufaults import GPU_FAULT, NEIGHBOUR_FAULT, MpsFaultHandler
from gpushare.agent.runtime.leftovers import kill_leftovers
from gpushare.agent.runtime.logstore import log_path
from gpushare.agent.runtime.monitor import GpuMonitor, WatchedPod
from gpushare.agent.runtime.supervisor import PodSupervisor, SupervisorConfig
from waiting import wait_for

HERE = Path(__file__).resolve().parent / "fake_mps"
FAKE = HERE / "nvidia-cuda-mps-control"
CLIENT = HERE / "cuda_client.py"
FAST = SupervisorConfig(backoff_base_s=0.1, backoff_max_s=0.4, poll_s=0.05, default_grace_s=5)


@pytest.fixture(autouse=True)
def fake_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_MPS_PYTHON", sys.executable)


class Recorder:
    def __init__(self) -> None:
        self.statuses: list[dict[str, Any]] = []
        self.events: list[tuple[str, str]] = []

    def report(self, status: dict[str, Any]) -> None:
        self.statuses.append(status)

    def terminated(self) -> None:
        pass

    def event(self, reason: str, message: str, warning: bool = False) -> None:
        self.events.append((reason, message))

    def container(self) -> dict[str, Any]:
        return ((self.statuses[-1] if self.statuses else {}).get("containerStatuses")
                or [{}])[0]


def started(tmp_path: Path, spec: str = "2xH100", stop_mode: str | None = None) -> MpsManager:
    inventory = declared_gpus("n", spec)
    if stop_mode is None:  # the agent's default
        manager = MpsManager(inventory.devices, tmp_path / "mps", str(FAKE))
    else:
        manager = MpsManager(inventory.devices, tmp_path / "mps", str(FAKE),
                             stop_mode=stop_mode)
    assert manager.start_all() == []
    return manager


def calls(manager: MpsManager, index: int = 0) -> list[str]:
    path = Path(manager.pipe_directory(index) or "") / "fake-mps-calls.log"
    return [line.split("\t", 2)[2] for line in path.read_text().splitlines()]


def client(manager: MpsManager, index: int, out: Path, *args: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=manager.pipe_directory(index) or "",
               CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="33",
               CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=1000M")
    return subprocess.Popen([sys.executable, str(CLIENT), *args], env=env,
                            stdout=out.open("wb"), stderr=subprocess.STDOUT)


def first_line(path: Path) -> dict[str, Any]:
    text = wait_for(lambda: path.exists() and path.read_text().strip(), 20, f"{path}")
    return json.loads(text.splitlines()[0])


def test_a_bad_stop_mode_is_refused_naming_the_option(tmp_path: Path) -> None:
    devices = declared_gpus("n", "1xH100").devices
    with pytest.raises(MpsStopError, match=r"--mps-stop 'terminate'.*signal, terminate-client"):
        MpsManager(devices, tmp_path / "mps", str(FAKE), stop_mode="terminate")
    assert not (tmp_path / "mps").exists()
    assert MpsManager(devices, tmp_path / "mps", str(FAKE)).stop_mode == STOP_SIGNAL


def test_parsers_read_the_daemons_answers() -> None:
    assert parse_pids("1234\n5678\n") == [1234, 5678]
    assert parse_pids("Server 77 not found\n") == []
    assert parse_status("ACTIVE\n") == "ACTIVE"
    assert parse_status("FAULT\n") == "FAULT"
    lines = ["[t] Server 4000000: client 812 encountered a fatal GPU exception (Xid 31)",
             "[t] New client 900 connected"]
    assert fault_clients(lines) == [812]


def test_server_side_limits_hold_for_a_client_that_raises_its_own(tmp_path: Path) -> None:
    manager = started(tmp_path)
    limits = server_limits([(0, 33, 47444), (0, 25, 30000), (1, 50, 70000)])
    assert limits == {0: (33, 47444), 1: (50, 70000)}
    assert manager.apply_limits({0: limits[0]}) == [0]
    assert "set_default_active_thread_percentage 33" in calls(manager, 0)
    assert "set_default_device_pinned_mem_limit 0 47444M" in calls(manager, 0)
    assert not any(c.startswith("set_") for c in calls(manager, 1))  # GPU 1 untouched
    honest = client(manager, 0, tmp_path / "honest.log")
    cheat = client(manager, 0, tmp_path / "cheat.log", "--cheat")
    try:
        assert first_line(tmp_path / "honest.log")["pct"] == 33
        cheated = first_line(tmp_path / "cheat.log")
        # the cheater asked for 100 % and no memory limit: the server's limits hold
        assert cheated["pct"] == 33 and cheated["mem_mib"] == {"0": 47444}
        before = len(calls(manager, 0))
        assert manager.apply_limits({0: (33, 47444)}) == []  # in force: nothing sent
        assert len(calls(manager, 0)) == before
        server = cheated["server"]
        assert manager.apply_limits({0: (50, 60000)}) == [0]  # the running server too
        assert f"set_active_thread_percentage {server} 50" in calls(manager, 0)
        assert f"set_device_pinned_mem_limit {server} 0 60000M" in calls(manager, 0)
    finally:
        for p in (honest, cheat):
            p.kill()
            p.wait()


def test_a_fault_stays_on_its_gpu(tmp_path: Path) -> None:
    manager = started(tmp_path)
    on0 = client(manager, 0, tmp_path / "a.log")
    on1 = client(manager, 1, tmp_path / "b.log")
    try:
        first_line(tmp_path / "a.log")
        first_line(tmp_path / "b.log")
        env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=manager.pipe_directory(0) or "",
                   CUDA_MPS_LOG_DIRECTORY=str(manager.daemons[0].log_directory))
        subprocess.run([str(FAKE), "--fake-fault", str(on0.pid)], env=env, check=True)
        states = {gpu: server.status for gpu, server in manager.all_servers()}
        assert states == {0: "FAULT", 1: "ACTIVE"}
        late0 = client(manager, 0, tmp_path / "c.log")
        late1 = client(manager, 1, tmp_path / "d.log")
        assert late0.wait(20) == 2  # GPU 0's server refuses new clients
        assert "error" not in first_line(tmp_path / "d.log")  # GPU 1's serves them
        late1.kill()
        late1.wait()
        assert fault_clients(manager.log_lines()[0]) == [on0.pid]
    finally:
        for p in (on0, on1):
            p.kill()
            p.wait()


def gpu_pod(name: str, restart: str = "Always", cheat: bool = False) -> dict[str, Any]:
    command = [sys.executable, str(CLIENT), *(["--cheat"] if cheat else [])]
    return {"metadata": {"name": name, "namespace": "t", "uid": f"uid-{name}",
                         "annotations": {"gpushare.io/gpu-indices": "0",
                                         "gpushare.io/gpu-portion": "0.33"}},
            "spec": {"nodeName": "n", "restartPolicy": restart,
                     "containers": [{"name": "main", "command": command}]}}


def run_pod(manager: MpsManager, directory: Path, pod: dict[str, Any],
            ended: list[Any]) -> tuple[PodSupervisor, Recorder]:
    from gpushare.agent.runtime.planning import gpu_env_for

    share = share_from_annotations(pod["metadata"]["annotations"],
                                   declared_gpus("n", "2xH100"))
    gpu_env = gpu_env_for(share, manager)
    env = {"PATH": os.environ["PATH"], "FAKE_MPS_PYTHON": sys.executable}

    def planner(container: dict[str, Any], init: bool):
        return plan_container(pod, container, "spec.containers[0]", env, gpu_env, _NoValues(),
                              init)

    def before_signal(groups: list[int]) -> None:
        ended.extend(end_gpu_work(manager, groups))

    recorder = Recorder()
    sup = PodSupervisor(pod, directory, planner, recorder, FAST, before_signal=before_signal)
    sup.start()
    return sup, recorder


class _NoValues:
    def config_map(self, namespace: str, name: str) -> None:
        return None

    def secret(self, namespace: str, name: str) -> None:
        return None


def connected(sup: PodSupervisor, run: int = 0) -> dict[str, Any]:
    """The connection of the pod's first run from `run` on that got a server (a run may be
    refused while a server recovers, and is restarted)."""

    def find() -> str | None:
        for n in range(run, run + 20):
            path = log_path(sup.directory, "main", n)
            if not path.exists():
                return None
            line = next((x for x in path.read_text().splitlines() if '"pct"' in x), None)
            if line:
                return line
        return None

    return json.loads(wait_for(find, 20, "a connected client"))


STOP_PATHS = ["delete", "watchdog-kill", "node-shutdown", "gpu-fault"]


def stop_through(path: str, sup: PodSupervisor, recorder: Recorder) -> None:
    """Stop the pod the way `path` does, and wait until its processes are gone."""
    if path == "delete":
        sup.stop(5)
    elif path == "watchdog-kill":
        sup.kill("GPUMemoryExceeded", "over its share")
        assert sup.wait_released(20)
        sup.stop(0)  # a killed pod stays (Failed) until it is deleted
    elif path == "node-shutdown":
        sup.shutdown(5)
    else:
        sup.gpu_fault(GPU_FAULT, "the server went into FAULT")
    if path == "gpu-fault":  # restarted by its policy (Always): a second run connects
        connected(sup, 1)
        assert recorder.container()["lastState"]["terminated"]["reason"] == GPU_FAULT
        sup.stop(5)
    assert sup.wait(20)


@pytest.mark.parametrize("path", STOP_PATHS)
def test_by_default_every_stop_path_uses_signals_alone(tmp_path: Path, path: str) -> None:
    manager = started(tmp_path)
    ended: list[Any] = []
    sup, recorder = run_pod(manager, tmp_path / "pod", gpu_pod("p"), ended)
    connected(sup)
    pid = wait_for(lambda: next(iter(manager.clients()), None), 10, "a client")
    stop_through(path, sup, recorder)
    assert ended == []
    assert not any(c.startswith("terminate_client") for c in calls(manager)), calls(manager)
    assert not any(c.startswith("terminate_client") for c in calls(manager, 1))
    assert pid not in manager.clients()  # the signals ended the client
    text = log_path(sup.directory, "main", 0).read_text()
    if path != "watchdog-kill":  # SIGTERM reached a client its server had not ended
        assert '"terminated_first": false' in text, text
    assert "cudaErrorMpsClientTerminated" not in text


@pytest.mark.parametrize("path", STOP_PATHS)
def test_opted_in_every_stop_path_ends_the_mps_clients_before_any_signal(tmp_path: Path,
                                                                         path: str) -> None:
    manager = started(tmp_path, stop_mode=STOP_TERMINATE_CLIENT)
    ended: list[Any] = []
    sup, recorder = run_pod(manager, tmp_path / "pod", gpu_pod("p"), ended)
    server = connected(sup)["server"]
    pid = wait_for(lambda: next(iter(manager.clients()), None), 10, "a client")
    stop_through(path, sup, recorder)
    terminates = [c for c in calls(manager) if c.startswith("terminate_client")]
    assert terminates[0] == f"terminate_client {server} {pid}"
    assert ended[0].client == pid and ended[0].ok, ended
    text = log_path(sup.directory, "main", 0).read_text()
    if path != "watchdog-kill":  # SIGTERM: the client says the server had ended it first
        assert '"terminated_first": true' in text, text
    # the fake's daemon answered "not found" had the client been gone (signalled) already
    assert "Client" not in ended[0].answer


@pytest.mark.parametrize("stop_mode", [STOP_SIGNAL, STOP_TERMINATE_CLIENT])
def test_leftover_pods_are_ended_through_the_same_path(tmp_path: Path, stop_mode: str) -> None:
    manager = started(tmp_path, stop_mode=stop_mode)
    ended: list[Any] = []
    sup, _ = run_pod(manager, tmp_path / "pod", gpu_pod("left"), ended)
    connected(sup)
    sup.detach()  # as if the agent had died; the pod's object is gone when it comes back
    sup.wait(5)
    killed = kill_leftovers(tmp_path / "pod", lambda g: ended.extend(end_gpu_work(manager, g)))
    assert killed
    wait_for(lambda: not manager.clients(), 10, "the leftover client gone")
    terminated = any(c.startswith("terminate_client") for c in calls(manager))
    if stop_mode == STOP_SIGNAL:
        assert ended == [] and not terminated
    else:
        assert ended and ended[0].ok and terminated


def test_a_fault_is_blamed_on_its_pod_and_every_client_pod_restarts(tmp_path: Path) -> None:
    manager = started(tmp_path)
    ended: list[Any] = []
    culprit, crec = run_pod(manager, tmp_path / "a", gpu_pod("a"), ended)
    neighbour, nrec = run_pod(manager, tmp_path / "b", gpu_pod("b", restart="Never"), ended)
    other_gpu = client(manager, 1, tmp_path / "other.log")
    pods = [WatchedPod("t/a", culprit, None), WatchedPod("t/b", neighbour, None)]
    reports: list[Any] = []
    handler = MpsFaultHandler(manager, lambda: pods, reports.append, stuck_s=3600)
    bad = connected(culprit)
    connected(neighbour)
    first_line(tmp_path / "other.log")
    assert handler.once() == []  # all ACTIVE: nothing to do
    culprit_pid = next(p for p in manager.clients() if p in _members(culprit))
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=manager.pipe_directory(0) or "",
               CUDA_MPS_LOG_DIRECTORY=str(manager.daemons[0].log_directory))
    subprocess.run([str(FAKE), "--fake-fault", str(culprit_pid)], env=env, check=True)
    try:
        [report] = handler.once()
        assert report.gpu == 0 and report.server == int(bad["server"])
        assert report.culprits == ("t/a",) and report.blamed_pids == (culprit_pid,)
        assert report.affected == ("t/a", "t/b")
        assert "t/a" in report.message and "FAULT" in report.message
        connected(culprit, 1)  # restarted by its policy (Always)...
        wait_for(lambda: crec.container().get("lastState", {}).get("terminated"), 10, "a")
        assert crec.container()["lastState"]["terminated"]["reason"] == GPU_FAULT
        # ...the neighbour's policy is Never: it ends, Failed
        assert neighbour.wait_released(10)
        wait_for(lambda: nrec.statuses[-1]["phase"] == "Failed", 10, "the neighbour Failed")
        assert nrec.container()["state"]["terminated"]["reason"] == NEIGHBOUR_FAULT
        # the default stop: the restarts were by signals alone
        assert ended == [] and not any(
            c.startswith("terminate_client") for c in calls(manager, 0) + calls(manager, 1))
        # the other GPU's client was not touched
        assert other_gpu.poll() is None
        assert handler.once() == []  # the same fault is reported once
    finally:
        for sup in (culprit, neighbour):
            sup.stop(2)
            sup.wait(10)
        other_gpu.kill()
        other_gpu.wait()


def test_a_server_stuck_in_fault_gets_its_daemon_restarted(tmp_path: Path) -> None:
    """Its clients left are ended with terminate_client even with the default stop mode:
    the server in FAULT already took every client's context."""
    manager = started(tmp_path, "1xH100")
    assert manager.stop_mode == STOP_SIGNAL
    stranger = client(manager, 0, tmp_path / "s.log")  # not a pod's: nobody restarts it
    try:
        first_line(tmp_path / "s.log")
        env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=manager.pipe_directory(0) or "",
                   CUDA_MPS_LOG_DIRECTORY=str(manager.daemons[0].log_directory))
        subprocess.run([str(FAKE), "--fake-fault", str(stranger.pid)], env=env, check=True)
        reports: list[Any] = []
        handler = MpsFaultHandler(manager, lambda: [], reports.append, stuck_s=0)
        assert [r.action for r in handler.once()] == ["restarted pods"]
        assert reports[0].culprits == () and "belong to no pod" in reports[0].message
        [again] = handler.once()
        assert again.action == "restarted the MPS daemon"
        log = calls(manager, 0)
        assert log.index("quit") < len(log) - 1 and log[-1] == "-d"
        assert f"terminate_client {reports[0].server} {stranger.pid}" in log
    finally:
        stranger.kill()
        stranger.wait()


def _members(sup: PodSupervisor) -> set[int]:
    from gpushare.agent.gpu.mps import pod_processes

    return pod_processes(sup.process_groups())


def test_the_compute_watchdog_evicts_only_work_that_mps_does_not_limit(tmp_path: Path) -> None:
    nvml = FakeNvml.with_gpus("1xH200")
    inventory = declared_gpus("fake-nvml-node", "1xH200")
    ann = {"gpushare.io/gpu-indices": "0", "gpushare.io/gpu-portion": "0.33"}
    sleeper = {"metadata": {"name": "x", "namespace": "t", "uid": "u", "annotations": ann},
               "spec": {"restartPolicy": "Never", "containers": [
                   {"name": "main", "command": [sys.executable, "-c",
                                                "import time; time.sleep(60)"]}]}}
    recorders, pods = [], []
    for name in ("escaped", "served"):
        pod = {**sleeper, "metadata": {**sleeper["metadata"], "name": name, "uid": name}}
        rec = Recorder()
        sup = PodSupervisor(pod, tmp_path / name, lambda c, i, p=pod: plan_container(
            p, c, "spec.containers[0]", {"PATH": os.environ["PATH"]}, {}, _NoValues(), i),
            rec, FAST)
        sup.start()
        recorders.append(rec)
        pods.append(WatchedPod(f"t/{name}", sup, share_from_annotations(ann, inventory)))
    pids = [wait_for(lambda s=p.supervisor: next(iter(_members(s)), None), 10, "pid")
            for p in pods]
    killed: list[Any] = []
    monitor = GpuMonitor(nvml, inventory, lambda: pods, compute_policy="evict",
                         mps_clients=lambda: {pids[1]}, compute_passes=3,
                         on_compute_kill=lambda pod, v: killed.append(v))
    for stamp in range(1, 4):
        nvml.utilization[0] = [ProcessUtilization(pid, 95, stamp * 1000) for pid in pids]
        monitor.once()
    assert [v.pod for v in killed] == ["t/escaped"]
    assert pods[0].supervisor.wait_released(10)
    wait_for(lambda: recorders[0].statuses[-1].get("reason") == "GPUComputeExceeded", 10,
             "the evicted pod's reason")
    assert "share is 33%" in recorders[0].statuses[-1]["message"]
    assert pods[1].supervisor.holds_gpu  # an MPS client: its server limits it
    for p in pods:
        p.supervisor.stop(1)
        p.supervisor.wait(10)


def test_the_server_log_of_driver_580_says_a_fault(tmp_path: Path) -> None:
    """Lines as the H100/H200's MPS server (driver 580) wrote them when a client faulted."""
    manager = started(tmp_path, "1xH100")
    log = manager.daemons[0].log_directory / "server.log"
    log.write_text(
        "[2026-12-05 09:22:05.523 Server   630] Client termination succeeded.\n"
        "[2026-12-05 09:22:05.680 Server   630] Client {PID: 684, Context: 1} encountered a "
        "fatal GPU error.\n"
        "[2026-12-05 09:22:05.680 Server   630] Server is handling a fatal GPU error.\n")
    lines = manager.log_lines()[0]
    assert fault_clients(lines) == [684]
    assert manager.log_says_faulting(0, 630) and not manager.log_says_faulting(0, 631)
    manager.log_lines()  # nothing new: no longer said
    assert not manager.log_says_faulting(0, 630)
    with log.open("a") as f:
        f.write("[2026-12-05 09:28:04.876 Server   630] Server teardown in progress. Refusing "
                "to accept new client {PID: 2352, Context ID: 0}\n")
    manager.log_lines()
    assert manager.log_says_faulting(0, 630)
