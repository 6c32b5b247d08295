"""stdin, stdinOnce and tty with real `kubectl` against a real `gpushare agent` process:
`kubectl run -i` echoes its input, `kubectl run -it --rm` gives a shell on a terminal, and
`attach -i` to a container without stdin is refused."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest
from test_agent_e2e import KUBECTL, NS, wait_for
from test_pod_limits_e2e import LimitsCluster

NODE = "stdin-node"
OVERRIDES = json.dumps({"spec": {"nodeName": NODE}})


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LimitsCluster]:
    c = LimitsCluster(tmp_path_factory.mktemp("stdin-e2e"))
    c.node = NODE
    c.start_agent_with()
    yield c
    if c.agent is not None:
        c.kill_agent(signal.SIGTERM)
    c.server.stop()


def _env(cluster: LimitsCluster) -> dict[str, str]:
    return dict(os.environ, KUBECONFIG=str(cluster.kubeconfig))


def test_kubectl_run_i_echoes_stdin_and_removes_the_pod(cluster: LimitsCluster) -> None:
    done = subprocess.run(
        [KUBECTL, "run", "echo", "-i", "--rm", "--restart=Never", "--image=busybox",
         f"--overrides={OVERRIDES}", "--pod-running-timeout=60s", "--", "cat"],
        input="hello from stdin\nsecond line\n", env=_env(cluster), capture_output=True,
        text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "hello from stdin\nsecond line\n" in done.stdout
    wait_for(lambda: cluster.pod("echo") is None, 30)  # --rm deleted it


def _read_until(fd: int, wanted: bytes, timeout: float) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while wanted not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    return seen


def test_kubectl_run_it_rm_gives_a_shell_on_a_terminal(cluster: LimitsCluster) -> None:
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [KUBECTL, "run", "shell", "-it", "--rm", "--restart=Never", "--image=busybox",
         f"--overrides={OVERRIDES}", "--pod-running-timeout=60s", "--", "/bin/sh"],
        stdin=slave, stdout=slave, stderr=slave, env=_env(cluster), start_new_session=True)
    os.close(slave)
    try:
        _read_until(master, b"command prompt", 60)
        os.write(master, b"test -t 0 && echo on-a-terminal; echo sum=$((20+22))\n")
        seen = _read_until(master, b"sum=42", 30)
        assert b"sum=42" in seen and b"on-a-terminal" in seen
        os.write(master, b"exit\n")
        rest = _read_until(master, b"\x00never", 20)
        assert proc.wait(60) == 0, rest
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    wait_for(lambda: cluster.pod("shell") is None, 30)


def test_attach_i_to_a_container_without_stdin_is_refused(cluster: LimitsCluster) -> None:
    cluster.create("quiet", ["sleep", "300"])
    cluster.wait_phase("quiet", "Running", timeout=30)
    done = subprocess.run([KUBECTL, "attach", "-i", "quiet", "-n", NS], input="x\n",
                          env=_env(cluster), capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode != 0
    assert "has no open stdin" in done.stderr
