"""The supervisor, log store/server, MPS manager and watchdog, with real processes and no API.

GPUs are absent here: the watchdog reads a FAKE NVML (`fake_nvml.FakeNvml`) that reports
GPU memory for the PIDs of real processes the supervisor started.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from fake_nvml import FakeNvml
from process_probes import gone, processes_named

from gpushare.agent.endpoint.nodeserver import parse_request
from gpushare.agent.gpu.enforcement import EnforcementError, choose
from gpushare.agent.gpu.gpu_share import share_from_annotations
from gpushare.agent.gpu.mps import MpsManager
from gpushare.agent.gpu.nvml import GpuProcess, ProcessUtilization, probe_inventory
from gpushare.agent.gpu.watchdog import PodGpuUsage, PodLimit, attribute, violations
from gpushare.agent.node.inventory import GpuInventory, declared_gpus
from gpushare.agent.pods.podspec import plan_container
from gpushare.agent.runtime.logstore import LogRequest, log_path, read_log
from gpushare.agent.runtime.monitor import GpuMonitor, WatchedPod
from gpushare.agent.runtime.supervisor import PodSupervisor, SupervisorConfig

FAST = SupervisorConfig(backoff_base_s=0.1, backoff_max_s=0.4, poll_s=0.05, default_grace_s=5)


class Recorder:
    def __init__(self) -> None:
        self.statuses: list[dict[str, Any]] = []
        self.deleted = False
        self.events: list[tuple[str, str]] = []

    def report(self, status: dict[str, Any]) -> None:
        self.statuses.append(status)

    def terminated(self) -> None:
        self.deleted = True

    def event(self, reason: str, message: str, warning: bool = False) -> None:
        self.events.append((reason, message))

    @property
    def last(self) -> dict[str, Any]:
        return self.statuses[-1] if self.statuses else {}


class NoValues:
    def config_map(self, namespace: str, name: str) -> None:
        return None

    def secret(self, namespace: str, name: str) -> None:
        return None


def pod(name: str, containers: list[dict], restart: str = "Always",
        init: list[dict] | None = None, annotations: dict | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeName": "n", "restartPolicy": restart, "containers": containers}
    if init:
        spec["initContainers"] = init
    return {"metadata": {"name": name, "namespace": "t", "uid": f"uid-{name}",
                         "annotations": annotations or {}}, "spec": spec}


def supervise(p: dict, directory: Path, config: SupervisorConfig = FAST):
    recorder = Recorder()

    def planner(container: dict, init: bool):
        return plan_container(p, container, "spec.containers[0]",
                              {"PATH": os.environ["PATH"]}, {}, NoValues(), init)

    sup = PodSupervisor(p, directory, planner, recorder, config)
    sup.start()
    return sup, recorder


def wait_for(check, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def main_state(recorder: Recorder) -> dict:
    return recorder.last.get("containerStatuses", [{}])[0]


# --- supervisor ---------------------------------------------------------------------------


def test_never_reports_the_exit_code_and_fails(tmp_path: Path) -> None:
    sup, rec = supervise(pod("p", [{"name": "c", "command": ["sh", "-c", "exit 7"]}], "Never"),
                         tmp_path)
    wait_for(lambda: rec.last.get("phase") == "Failed")
    terminated = main_state(rec)["state"]["terminated"]
    assert terminated["exitCode"] == 7 and terminated["reason"] == "Error"
    assert main_state(rec)["restartCount"] == 0
    sup.stop(0)
    assert sup.wait(5) and rec.deleted


def test_on_failure_restarts_until_success(tmp_path: Path) -> None:
    # fails twice (counting runs in a file), then succeeds
    script = 'n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count; [ $n -ge 3 ]'
    sup, rec = supervise(pod("p", [{"name": "c", "command": ["sh", "-c", script]}], "OnFailure"),
                         tmp_path)
    wait_for(lambda: rec.last.get("phase") == "Succeeded")
    status = main_state(rec)
    assert status["restartCount"] == 2
    assert status["state"]["terminated"]["exitCode"] == 0
    assert status["lastState"]["terminated"]["exitCode"] == 1
    assert any(
        s["containerStatuses"][0]["state"].get("waiting", {}).get("reason") == "CrashLoopBackOff"
        for s in rec.statuses
    )
    sup.stop(0)


def test_always_restarts_even_after_success(tmp_path: Path) -> None:
    sup, rec = supervise(pod("p", [{"name": "c", "command": ["true"]}], "Always"), tmp_path)
    wait_for(lambda: main_state(rec).get("restartCount", 0) >= 3)
    assert rec.last["phase"] == "Running"
    # the back-off doubles up to its cap (0.1 s, 0.2 s, 0.4 s, 0.4 s here)
    delays = [m for r, m in rec.events if r == "BackOff"]
    assert "next start in 0.1s" in delays[0] and "next start in 0.2s" in delays[1]
    assert "next start in 0.4s" in delays[2]
    sup.stop(0)
    assert sup.wait(5)
    reasons = [r for r, _ in rec.events]
    # stopping is not a crash: no back-off after the Killing
    if "Killing" in reasons:
        assert "BackOff" not in reasons[reasons.index("Killing"):]


def test_init_containers_run_first_in_order_and_must_succeed(tmp_path: Path) -> None:
    p = pod(
        "p",
        [{"name": "main", "command": ["sh", "-c", "echo main >> order"]}],
        "Never",
        init=[{"name": "one", "command": ["sh", "-c", "echo one >> order"]},
              {"name": "two", "command": ["sh", "-c", "echo two >> order"]}],
    )
    sup, rec = supervise(p, tmp_path)
    wait_for(lambda: rec.last.get("phase") == "Succeeded")
    assert (tmp_path / "order").read_text().split() == ["one", "two", "main"]
    assert [s["state"]["terminated"]["exitCode"] for s in rec.last["initContainerStatuses"]] == [
        0, 0]
    assert any(c["type"] == "Initialized" and c["status"] == "True"
               for c in rec.last["conditions"])
    sup.stop(0)

    failing = pod("q", [{"name": "main", "command": ["sh", "-c", "echo ran > main-ran"]}],
                  "Never", init=[{"name": "bad", "command": ["false"]}])
    sup, rec = supervise(failing, tmp_path / "q")
    wait_for(lambda: rec.last.get("phase") == "Failed")
    assert not (tmp_path / "q" / "main-ran").exists()
    sup.stop(0)


def test_a_missing_executable_is_a_start_error(tmp_path: Path) -> None:
    sup, rec = supervise(pod("p", [{"name": "c", "command": ["no-such-binary-xyz"]}], "Never"),
                         tmp_path)
    wait_for(lambda: rec.last.get("phase") == "Failed")
    terminated = main_state(rec)["state"]["terminated"]
    assert terminated["reason"] == "StartError" and "no-such-binary-xyz" in terminated["message"]
    sup.stop(0)


def test_stop_terms_then_kills_the_whole_process_group(tmp_path: Path) -> None:
    # the shell ignores SIGTERM; its background child would outlive a kill of the leader alone
    script = "trap '' TERM; sleep 300 & echo $! > child.pid; wait"
    sup, rec = supervise(pod("p", [{"name": "c", "command": ["sh", "-c", script]}]), tmp_path)
    child = int(wait_for(lambda: (tmp_path / "child.pid").exists()
                         and (tmp_path / "child.pid").read_text().strip()))
    groups = sup.process_groups()
    assert groups and psutil.pid_exists(child)
    sup.stop(0.5)
    assert sup.wait(10)
    assert rec.deleted
    assert gone(child)
    assert main_state(rec)["state"]["terminated"]["exitCode"] == 137


def test_a_new_supervisor_adopts_running_processes_instead_of_starting_again(
    tmp_path: Path,
) -> None:
    p = pod("p", [{"name": "c", "command": ["sh", "-c", "echo run >> runs; sleep 300"]}])
    first, _ = supervise(p, tmp_path)
    wait_for(lambda: (tmp_path / "runs").exists())
    pgid = first.process_groups()[0]
    # the agent dies: its supervisor thread is gone, the processes stay
    first.detach()
    assert first.wait(5)
    second, rec = supervise(p, tmp_path)
    wait_for(lambda: rec.last.get("phase") == "Running")
    assert second.process_groups() == [pgid]
    time.sleep(0.3)
    assert (tmp_path / "runs").read_text().split() == ["run"]
    second.stop(0)
    assert second.wait(10)


def test_adopted_process_exit_code_comes_from_the_exit_file(tmp_path: Path) -> None:
    p = pod("p", [{"name": "c", "command": ["sh", "-c", "sleep 0.5; exit 5"]}], "Never")
    first, _ = supervise(p, tmp_path)
    wait_for(lambda: first.process_groups())
    first.detach()
    assert first.wait(5)
    second, rec = supervise(p, tmp_path)
    wait_for(lambda: rec.last.get("phase") == "Failed")
    assert main_state(rec)["state"]["terminated"]["exitCode"] == 5
    second.stop(0)


# --- logs -----------------------------------------------------------------------------


def test_logs_tail_previous_and_timestamps(tmp_path: Path) -> None:
    sup, rec = supervise(
        pod("p", [{"name": "c", "command": ["sh", "-c", "echo one; echo two; echo three; exit 1"]}],
            "OnFailure"), tmp_path)
    wait_for(lambda: main_state(rec).get("restartCount", 0) >= 1)
    sup.stop(0)
    sup.wait(5)
    path = log_path(tmp_path, "c", 0)
    body, _ = read_log(path, LogRequest("t", "p", "c"))
    assert body == b"one\ntwo\nthree\n"
    body, _ = read_log(path, LogRequest("t", "p", "c", tail_lines=1))
    assert body == b"three\n"
    body, _ = read_log(path, LogRequest("t", "p", "c", timestamps=True))
    first = body.splitlines()[0].decode()
    assert first.endswith(" one") and first[:4].isdigit() and "T" in first.split()[0]


def test_log_request_parsing_names_bad_parameters() -> None:
    request = parse_request("/containerLogs/ns/p/c?follow=true&tailLines=5&timestamps=1")
    assert (request.follow, request.tail_lines, request.timestamps) == (True, 5, True)
    with pytest.raises(ValueError, match="tailLines"):
        parse_request("/containerLogs/ns/p/c?tailLines=x")
    for bad in ("/containerLogs/../p/c", "/containerLogs/ns/..%2F..%2Fetc/c",
                "/containerLogs/ns/p/.gpushare"):
        with pytest.raises(ValueError, match="not a valid name"):
            parse_request(bad)


# --- watchdog -------------------------------------------------------------------------


def test_attribution_and_violation_decisions() -> None:
    owners = {10: "ns/a", 11: "ns/a", 20: "ns/b"}
    usage = attribute(
        {0: [GpuProcess(10, 30 << 30), GpuProcess(11, 10 << 30), GpuProcess(20, 1 << 30),
             GpuProcess(99, 5 << 30)]},
        owners.get,
        {0: [ProcessUtilization(10, 40, 5), ProcessUtilization(10, 20, 9),
             ProcessUtilization(20, 30, 9)]},
    )
    assert usage["ns/a"].memory_mib == {0: 40960}  # both processes summed
    assert usage["ns/a"].sm_percent == {0: 20}  # the latest sample of pid 10
    assert "99" not in str(usage)  # not started by the agent: ignored
    limits = {"ns/a": PodLimit("ns/a", (0,), 35000, 33000),
              "ns/b": PodLimit("ns/b", (1,), 35000, 33000)}
    found = violations(usage, limits)
    assert [(v.pod, v.gpu_index) for v in found] == [("ns/a", 0), ("ns/b", 0)]
    assert found[1].share_mib == 0  # ns/b holds memory on a GPU it was not given
    assert "40960 MiB" in found[0].message and "33000 MiB" in found[0].message
    assert PodGpuUsage({0: 5}, {0: 7}).to_annotation(10).startswith('{"allocatedMemoryMiB":10')


def test_watchdog_kills_the_pod_over_its_share_and_spares_the_other(tmp_path: Path) -> None:
    nvml = FakeNvml.with_gpus("1xH100")
    inventory = probe_inventory(nvml)
    annotations = {"gpushare.io/gpu-indices": "0", "gpushare.io/gpu-portion": "0.5"}
    watched = []
    for name in ("greedy", "modest"):
        p = pod(name, [{"name": "c", "command": ["sh", "-c", "sleep 300 & wait"]}], "Always",
                annotations=annotations)
        sup, rec = supervise(p, tmp_path / name)
        watched.append((WatchedPod(f"t/{name}", sup, share_from_annotations(
            annotations, inventory)), rec))
    wait_for(lambda: all(w.supervisor.process_groups() for w, _ in watched))
    # the fake NVML reports the grandchild `sleep` of each pod (attributed by process group)
    pids = {}
    for w, _ in watched:
        pgid = w.supervisor.process_groups()[0]
        pids[w.key] = wait_for(lambda pgid=pgid: processes_named("sleep", pgid))[0]
    nvml.processes[0] = [GpuProcess(pids["t/greedy"], 60_000 << 20),
                         GpuProcess(pids["t/modest"], 30_000 << 20)]
    killed = []
    monitor = GpuMonitor(nvml, inventory, lambda: [w for w, _ in watched],
                         on_kill=lambda pod, v: killed.append(v))
    result = monitor.once()
    assert [v.pod for v in result.killed] == ["t/greedy"] and killed
    greedy_rec, modest_rec = watched[0][1], watched[1][1]
    wait_for(lambda: greedy_rec.last.get("phase") == "Failed")
    assert greedy_rec.last["reason"] == "GPUMemoryExceeded"
    assert "60000 MiB" in greedy_rec.last["message"]
    assert gone(pids["t/greedy"])
    assert modest_rec.last["phase"] == "Running"
    assert result.usage["t/modest"].memory_mib == {0: 30000}
    for w, _ in watched:
        w.supervisor.stop(0)
        w.supervisor.wait(5)


# --- MPS and enforcement choice ---------------------------------------------------------


class FakeMpsControl:
    """Stands in for `nvidia-cuda-mps-control` (no GPU here): records the calls."""

    def __init__(self, start_ok: bool = True) -> None:
        self.calls: list[tuple[list[str], dict[str, str], str | None]] = []
        self.start_ok = start_ok
        self.up: set[str] = set()

    def __call__(self, argv: list[str], env: dict[str, str], stdin: str | None):
        self.calls.append((argv, env, stdin))
        pipe = env["CUDA_MPS_PIPE_DIRECTORY"]
        if argv[1:] == ["-d"]:
            if not self.start_ok:
                return 1, "An instance of this daemon is already running"
            self.up.add(pipe)
            Path(pipe, "control").touch()
            return 0, ""
        if stdin == "quit\n":
            self.up.discard(pipe)
            return 0, ""
        return (0, "") if pipe in self.up else (1, "not running")


def test_mps_manager_starts_one_daemon_per_gpu_and_restarts_dead_ones(tmp_path: Path) -> None:
    inventory = declared_gpus("n", "2xH100")
    control = FakeMpsControl()
    manager = MpsManager(inventory.devices, tmp_path / "mps", "mps-control", control)
    assert manager.start_all() == []
    starts = [(env["CUDA_VISIBLE_DEVICES"], env["CUDA_MPS_PIPE_DIRECTORY"])
              for argv, env, _ in control.calls if argv[1:] == ["-d"]]
    assert starts == [(d.uuid, str(tmp_path / "mps" / f"gpu{d.index}" / "pipe"))
                      for d in inventory.devices]
    assert manager.supervise() == []
    control.up.discard(manager.pipe_directory(1))  # GPU 1's daemon died
    assert manager.supervise() == [1]
    manager.stop_all()
    assert control.up == set()


def _real(inventory: GpuInventory) -> GpuInventory:
    return GpuInventory(devices=inventory.devices, declared=False)


def test_enforcement_choice() -> None:
    declared = declared_gpus("n", "1xL40S")
    assert choose("auto", declared, False, lambda: None).annotation == "none (declared GPUs)"
    with pytest.raises(EnforcementError, match="declared"):
        choose("mps", declared, False, lambda: None)
    real = _real(declared)

    def manager(ok: bool):
        return lambda: MpsManager(real.devices, Path("/tmp/gpushare-test-mps"), "x",
                                  FakeMpsControl(ok))

    found = choose("auto", real, True, manager(True), which=lambda _: "/bin/mps")
    assert found.annotation == "mps,nvml-watchdog" and found.mps is not None
    fallback = choose("auto", real, True, manager(False), which=lambda _: "/bin/mps")
    assert fallback.annotation == "nvml-watchdog" and "MPS not used" in fallback.notes[0]
    absent = choose("auto", real, True, manager(True), which=lambda _: None)
    assert absent.annotation == "nvml-watchdog"
    with pytest.raises(EnforcementError, match="not on PATH"):
        choose("mps", real, True, manager(True), which=lambda _: None)
    assert choose("watchdog", real, True, manager(True)).backends == ("nvml-watchdog",)
    with pytest.raises(EnforcementError, match="NVML"):
        choose("watchdog", real, False, manager(True))


def test_logs_limit_bytes_and_since_seconds(tmp_path: Path) -> None:
    from gpushare.agent.runtime.logstore import TimestampIndex

    log = tmp_path / "0.log"
    log.write_bytes(b"old line\n")
    index = TimestampIndex(log)
    index.observe(now_ns=time.time_ns() - 3600 * 10**9)  # seen an hour ago
    with log.open("ab") as f:
        f.write(b"new line\n")
    index.observe()
    body, _ = read_log(log, LogRequest("t", "p", "c", since_seconds=60))
    assert body == b"new line\n"
    body, _ = read_log(log, LogRequest("t", "p", "c", limit_bytes=5))
    assert body == b"old l"
    request = parse_request("/containerLogs/ns/p/c?limitBytes=10&sinceSeconds=5")
    assert (request.limit_bytes, request.since_seconds) == (10, 5)


# --- the PyTorch hook -------------------------------------------------------------------

FAKE_TORCH_CUDA = '''
"""A FAKE torch.cuda for tests without PyTorch or GPUs: it records what is called."""
calls = []
_initialized = False
def is_initialized():
    return _initialized
def _lazy_init():
    global _initialized
    _initialized = True
    calls.append("init")
def device_count():
    return 2
def set_per_process_memory_fraction(fraction, device):
    _lazy_init()
    calls.append(("fraction", fraction, device))
'''


def test_planner_puts_the_torch_hook_on_pythonpath_for_fractions() -> None:
    from gpushare.agent.runtime.planning import TORCH_HOOK_DIR, make_planner

    inventory = declared_gpus("n", "1xH100")
    container = {"name": "c", "command": ["python3"],
                 "env": [{"name": "PYTHONPATH", "value": "/mine"}]}
    fraction = pod("p", [container], annotations={"gpushare.io/gpu-indices": "0",
                                                  "gpushare.io/gpu-portion": "0.25"})
    share = share_from_annotations(fraction["metadata"]["annotations"], inventory)
    plan = make_planner(fraction, share, {"PATH": "/bin"}, NoValues())(container, False)
    assert plan.env["PYTHONPATH"] == f"{TORCH_HOOK_DIR}{os.pathsep}/mine"
    assert plan.env["GPUSHARE_TORCH_MEMORY_FRACTION"] == "0.2500"
    whole = pod("w", [container], annotations={"gpushare.io/gpu-indices": "0"})
    share = share_from_annotations(whole["metadata"]["annotations"], inventory)
    plan = make_planner(whole, share, {"PATH": "/bin"}, NoValues())(container, False)
    assert plan.env["PYTHONPATH"] == "/mine"


def test_torch_hook_sets_the_memory_fraction_at_first_cuda_use(tmp_path: Path) -> None:
    import subprocess
    import sys

    from gpushare.agent.runtime.planning import TORCH_HOOK_DIR

    (tmp_path / "torch" / "cuda").mkdir(parents=True)
    (tmp_path / "torch" / "__init__.py").write_text("")
    (tmp_path / "torch" / "cuda" / "__init__.py").write_text(FAKE_TORCH_CUDA)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "sitecustomize.py").write_text(
        "import os\nos.environ['OTHER_SITECUSTOMIZE'] = 'ran'\n")
    program = ("import os, torch.cuda as c; before = list(c.calls); c._lazy_init(); "
               "c._lazy_init(); print(before, c.calls, os.environ.get('OTHER_SITECUSTOMIZE'))")
    env = {"PATH": os.environ["PATH"], "GPUSHARE_TORCH_MEMORY_FRACTION": "0.33",
           "PYTHONPATH": os.pathsep.join([str(TORCH_HOOK_DIR), str(tmp_path),
                                          str(tmp_path / "other")])}
    out = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True,
                         text=True, check=True).stdout
    before, calls, other = out.rsplit(" ", 1)[0], out, out.split()[-1]
    assert before.startswith("[]")  # nothing happens at import: CUDA is not initialised
    assert "('fraction', 0.33, 0)" in calls and "('fraction', 0.33, 1)" in calls
    assert calls.count("fraction") == 2  # once per device, not at every _lazy_init
    assert other == "ran"  # the next sitecustomize on the path still runs
    env.pop("GPUSHARE_TORCH_MEMORY_FRACTION")
    out = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True,
                         text=True, check=True).stdout
    assert "fraction" not in out


def test_a_planner_failure_waits_and_retries_instead_of_killing_the_pod(tmp_path: Path) -> None:
    attempts = []
    p = pod("p", [{"name": "c", "command": ["true"]}], "Never")

    def flaky_planner(container: dict, init: bool):
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("API server unreachable")
        return plan_container(p, container, "spec.containers[0]",
                              {"PATH": os.environ["PATH"]}, {}, NoValues(), init)

    recorder = Recorder()
    config = SupervisorConfig(backoff_base_s=0.1, poll_s=0.05)
    sup = PodSupervisor(p, tmp_path, flaky_planner, recorder, config)
    sup.start()
    wait_for(lambda: recorder.last.get("phase") == "Succeeded", 10)
    waiting = [s["containerStatuses"][0]["state"].get("waiting", {}) for s in recorder.statuses]
    assert any(w.get("reason") == "CreateContainerConfigError"
               and "unreachable" in w.get("message", "") for w in waiting)
    sup.stop(0)


def test_shutdown_ends_processes_but_keeps_the_pod_for_the_next_agent(tmp_path: Path) -> None:
    p = pod("p", [{"name": "c", "command": ["sh", "-c", "echo run >> runs; sleep 300"]}])
    first, rec = supervise(p, tmp_path)
    wait_for(lambda: (tmp_path / "runs").exists() and first.process_groups())
    pgid = first.process_groups()[0]
    first.shutdown(1.0)
    assert first.wait(10)
    assert not rec.deleted  # the pod object stays
    assert gone(pgid)
    assert "running" not in main_state(rec)["state"]
    # the next agent restarts it by its policy (Always)
    second, rec2 = supervise(p, tmp_path)
    wait_for(lambda: (tmp_path / "runs").read_text().split() == ["run", "run"])
    wait_for(lambda: main_state(rec2).get("restartCount") == 1
             and "running" in main_state(rec2)["state"])
    second.stop(0)
    assert second.wait(10)


def test_a_pod_that_ended_holds_no_gpu_share_once_its_end_is_published(tmp_path: Path) -> None:
    """The scheduler frees a pod's GPU share when it sees the pod Succeeded/Failed (or
    gone); the agent's ledger must not count it from then on, although the supervisor
    keeps the pod's status and logs until the pod object is deleted."""
    done, recorder = supervise(pod("done", [{"name": "c", "command": ["true"]}], "Never"),
                               tmp_path / "done")
    stopped, stopped_rec = supervise(pod("stopped", [{"name": "c", "command": ["sleep", "30"]}]),
                                     tmp_path / "stopped")
    try:
        wait_for(lambda: recorder.last.get("phase") == "Succeeded")
        assert not done.holds_gpu and not done.finished
        wait_for(lambda: stopped_rec.last.get("phase") == "Running")
        assert stopped.holds_gpu
        stopped.stop(0)
        wait_for(lambda: stopped_rec.deleted)
        assert not stopped.holds_gpu
    finally:
        for sup in (done, stopped):
            sup.stop(0)
            sup.wait(10)


def test_a_pod_that_had_ended_holds_no_gpu_share_from_the_moment_it_is_adopted(
        tmp_path: Path) -> None:
    """A restarted agent picks up an ended pod and, straight after, the pod bound to its
    GPU share: the ledger must not count the ended one meanwhile (its record is read by
    `start`, not later on the supervisor's thread)."""
    p = pod("done", [{"name": "c", "command": ["true"]}], "Never")
    first, recorder = supervise(p, tmp_path)
    wait_for(lambda: recorder.last.get("phase") == "Succeeded")
    first.detach()
    assert first.wait(5)
    for _ in range(5):
        again, _ = supervise(p, tmp_path)
        held = again.holds_gpu  # read at once, before its thread may have run
        again.detach()
        assert again.wait(5)
        assert not held
