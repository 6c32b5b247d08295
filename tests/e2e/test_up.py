"""``gpushare up`` starts the control plane, the controllers and an agent; Ctrl-C stops
them all. ``gpushare node add`` rejects bad options with the option's name."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
from e2e_support import KUBECTL, wait_for

GPUSHARE = [sys.executable, "-m", "gpushare.cli.main"]


def _cmdline(process: psutil.Process) -> str:
    """The command line, or "" for a process that has exited (a zombie not yet reaped)."""
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


def test_up_runs_everything_and_ctrl_c_stops_it_all(tmp_path: Path):
    data = tmp_path / "state"
    proc = subprocess.Popen(
        [*GPUSHARE, "up", "--data-dir", str(data), "--port", "0", "--gpus", "1xL40S",
         "--node-name", "box"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    kubeconfig = data / "admin.kubeconfig"
    try:
        def node_ready():
            if not kubeconfig.exists():
                return None
            done = subprocess.run([KUBECTL, "--kubeconfig", str(kubeconfig), "get", "node",
                                   "box", "-o", "jsonpath={.status.conditions[0].status}"],
                                  capture_output=True, text=True)
            return done.stdout == "True"

        wait_for(node_ready, timeout=60, what="the agent's node Ready")
        queues = subprocess.run([KUBECTL, "--kubeconfig", str(kubeconfig), "get", "queues",
                                 "-o", "name"], capture_output=True, text=True).stdout
        assert "default-queue" in queues
        def kubectl(*args: str) -> str:
            return subprocess.run([KUBECTL, "--kubeconfig", str(kubeconfig), *args],
                                  capture_output=True, text=True, timeout=60).stdout

        # A Job as users create it: no queue label (default-queue), no schedulerName.
        kubectl("create", "job", "hello", "--image=busybox", "--", "echo", "hello from a job")
        wait_for(lambda: "1/1" in kubectl("get", "job", "hello"), timeout=60,
                 what="the Job complete")
        pod = kubectl("get", "pods", "-l", "job-name=hello", "-o", "name").strip()
        assert "hello from a job" in kubectl("logs", pod)
        # No earlier container: Kubernetes' 400 and message, not a proxy error.
        previous = subprocess.run([KUBECTL, "--kubeconfig", str(kubeconfig), "logs", pod,
                                   "--previous"], capture_output=True, text=True, timeout=60)
        assert previous.returncode != 0
        assert "(BadRequest)" in previous.stderr, previous.stderr
        assert 'previous terminated container "hello"' in previous.stderr, previous.stderr
        children = psutil.Process(proc.pid).children(recursive=True)
        commands = [_cmdline(c) for c in children]
        assert any(" controllers " in c for c in commands), commands
        _assert_controllers_have_their_own_identity(data, commands)
        assert any(" agent " in c for c in commands), commands

        # A child that dies is started again, and the cluster keeps working.
        first = next(c for c in children if " controllers " in _cmdline(c))
        first.kill()

        def replaced():
            now = psutil.Process(proc.pid).children(recursive=True)
            return [c for c in now if " controllers " in _cmdline(c) and c.pid != first.pid]

        wait_for(replaced, timeout=30, what="the controllers restarted")
        kubectl("create", "job", "again", "--image=busybox", "--", "echo", "still here")
        wait_for(lambda: "1/1" in kubectl("get", "job", "again"), timeout=60,
                 what="a Job complete after the restart")
        children = psutil.Process(proc.pid).children(recursive=True)
    finally:
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, output
    assert "export KUBECONFIG=" in output and "stopped." in output
    time.sleep(0.2)
    assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]


def _assert_controllers_have_their_own_identity(data: Path, commands: list[str]) -> None:
    """The controllers (which bound the Job's pod) run as system:gpushare-controllers with
    the roles of controllers/rbac.yaml, not as the admin."""
    controllers = next(c for c in commands if " controllers " in c)
    assert "admin.kubeconfig" not in controllers, controllers
    assert f"--kubeconfig {data / 'controllers.kubeconfig'}" in controllers, controllers
    assert f"--tenant-kubeconfig {data / 'tenancy.kubeconfig'}" in controllers, controllers
    for name in ("controllers", "tenancy"):
        assert (data / f"{name}.kubeconfig").stat().st_mode & 0o777 == 0o600

    def as_controllers(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([KUBECTL, "--kubeconfig", str(data / "controllers.kubeconfig"),
                               *args], capture_output=True, text=True, timeout=60)

    whoami = json.loads(as_controllers("auth", "whoami", "-o", "json").stdout)
    assert whoami["status"]["userInfo"]["username"] == "system:gpushare-controllers"
    assert "system:masters" not in whoami["status"]["userInfo"]["groups"]
    assert as_controllers("auth", "can-i", "create", "pods/binding").stdout.strip() == "yes"
    for verb, resource in (("create", "clusterrolebindings"), ("escalate", "clusterroles"),
                           ("delete", "nodes"), ("*", "*")):
        assert as_controllers("auth", "can-i", verb, resource).stdout.strip() == "no", \
            (verb, resource)
    # The tenancy identity is for tenant clusters only.
    refused = subprocess.run([KUBECTL, "--kubeconfig", str(data / "tenancy.kubeconfig"), "get",
                              "namespaces"], capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "Unauthorized" in refused.stderr, refused.stderr


def test_node_add_names_the_bad_option(tmp_path: Path):
    done = subprocess.run([*GPUSHARE, "node", "add", "n1", "--gpus", "8xNOPE"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "--gpus" in done.stderr and "NOPE" in done.stderr
    assert "Traceback" not in done.stderr


def test_bad_scheduler_config_is_refused_naming_the_key(tmp_path: Path):
    config = tmp_path / "scheduler.yaml"
    config.write_text("config:\n  placement: {gpu: everywhere}\n")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    done = subprocess.run([*GPUSHARE, "controllers", "--kubeconfig", str(kubeconfig),
                           "--scheduler-config", str(config)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "config.placement.gpu" in done.stderr and "Traceback" not in done.stderr


def test_up_on_a_busy_port_says_so(tmp_path: Path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = subprocess.run([*GPUSHARE, "up", "--data-dir", str(tmp_path / "d"), "--port",
                               str(port), "--no-agent"], capture_output=True, text=True,
                              timeout=60)
    assert done.returncode == 1
    assert "--port" in done.stderr and "Traceback" not in done.stderr


def test_up_says_why_a_child_fails_and_exits_non_zero(tmp_path: Path):
    data = tmp_path / "state"
    data.mkdir()
    (data / "agent").write_text("a file where the agent's directory should be\n")
    done = subprocess.run(
        [*GPUSHARE, "up", "--data-dir", str(data), "--port", "0", "--gpus", "1xL40S",
         "--node-name", "box"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode != 0, done.stdout + done.stderr
    assert "gpushare is up" not in done.stdout
    # The child's own reason, from its log, on the terminal.
    assert "error: agent exited" in done.stderr, done.stderr
    assert "  | " in done.stderr and str(data / "agent") in done.stderr, done.stderr
    assert "stopped." in done.stdout


def test_up_without_a_gpu_declares_one_and_says_so(tmp_path: Path):
    from gpushare.agent.gpu.nvml import NvmlUnavailable, PynvmlBackend

    try:
        PynvmlBackend().close()
        has_gpu = True
    except NvmlUnavailable:
        has_gpu = False
    data = tmp_path / "state"
    proc = subprocess.Popen(
        [*GPUSHARE, "up", "--data-dir", str(data), "--port", "0", "--node-name", "box"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    kubeconfig = data / "admin.kubeconfig"
    try:
        def node():
            if not kubeconfig.exists():
                return None
            done = subprocess.run([KUBECTL, "--kubeconfig", str(kubeconfig), "get", "node",
                                   "box", "-o", "json"], capture_output=True, text=True)
            return json.loads(done.stdout) if done.returncode == 0 else None

        found = wait_for(lambda: (n := node()) and any(
            c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"]
        ) and n, timeout=60, what="the agent's node Ready")
        assert int(found["status"]["capacity"]["nvidia.com/gpu"]) >= 1
    finally:
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, output
    if not has_gpu:
        assert "no GPU found through NVML" in output and "1xL40S" in output, output
        assert found["metadata"]["annotations"].get("gpushare.io/gpus-declared") == "true"
