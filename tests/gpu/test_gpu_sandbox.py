"""CUDA inside the pod sandbox on a real GPU (skipped where NVML finds no GPU): two sandboxed
"pods" (the agent's launch path: `process.start` with each pod's `SandboxState`) are clients
of the same MPS daemon at once, each as an unprivileged user, each in its own directory.
They share the GPU's MPS uid (a daemon serves one uid at a time: with a uid each, the second
would wait for the first to end and this test would time out)."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_gpu_share import _gpu_present

from gpushare.agent.runtime import process as proc
from gpushare.agent.runtime import sandbox as sb
from gpushare.agent.runtime.logstore import META_DIR

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]

# holds a CUDA context, says so, then keeps it while the other pod gets one too
CLIENT = """
import os, sys, time, torch
x = torch.ones(1024, device="cuda")
print("ready", os.getuid(), os.getgid(), float(x.sum()), flush=True)
deadline = time.time() + 60
while not os.path.exists("release") and time.time() < deadline:
    time.sleep(0.2)
# after the other client has ended, this one's context must still work
y = torch.ones(2048, device="cuda") * 2
torch.cuda.synchronize()
print("done", float(y.sum()), flush=True)
"""


@pytest.fixture()
def data_dir() -> Iterator[Path]:
    if not _gpu_present():
        pytest.skip("NVML finds no GPU here")
    if os.geteuid() != 0:
        pytest.skip("the sandbox needs the agent's root")
    # a 0700 parent, as pytest's temporary directories have: the pods reach their own
    # directory relatively and the MPS pipes outside the data dir (sandbox.mps_base)
    root = Path(tempfile.mkdtemp(prefix="gpushare-gpu-sandbox-"))
    yield root / "agent"
    shutil.rmtree(root, ignore_errors=True)


def _wait(check, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError("condition not reached in time")


def _diagnose(mps, logs: list[str]) -> str:
    """What to look at when the clients did not both get a context: their logs, the MPS
    processes of the machine (another daemon's server on the same GPU holds it), the
    daemon's answers and its logs."""
    import subprocess

    daemon = next(iter(mps.daemons.values()))
    ps = subprocess.run(["ps", "-eo", "pid,ppid,uid,gid,stat,etime,args"], capture_output=True,
                        text=True, check=False).stdout
    parts = [f"client logs: {logs}",
             "MPS processes:\n" + "\n".join(x for x in ps.splitlines() if "mps" in x.lower()),
             f"servers: {daemon.servers()}"]
    for name in ("control.log", "server.log"):
        path = daemon.log_directory / name
        parts.append(f"{name}: " + (path.read_text()[-2000:] if path.exists() else "(none)"))
    return "\n".join(parts)


def test_two_sandboxed_mps_clients_share_the_gpu_at_once(data_dir: Path) -> None:
    from gpushare.agent.gpu.mps import MpsManager
    from gpushare.agent.gpu.nvml import PynvmlBackend, probe_inventory

    inventory = probe_inventory(PynvmlBackend())
    if shutil.which("nvidia-cuda-mps-control") is None:
        pytest.skip("no MPS control daemon on this machine")
    pods_root = data_dir / "pods"
    policy = sb.open_for_pods(sb.choose_policy("auto", [data_dir]), data_dir, pods_root)
    mps = MpsManager(inventory.devices[:1], sb.mps_base(data_dir))
    assert mps.start_all() == []
    pipe = mps.pipe_directory(inventory.devices[0].index)
    assert pipe is not None
    started: list[tuple[sb.SandboxState, proc.ContainerProcess]] = []
    try:
        for name in ("a", "b"):
            directory = pods_root / "default" / name
            state = sb.new_state(policy, directory, name, sb.ids_in_use(pods_root),
                                 mps_gpu=0, devices=sb.gpu_devices(), writable=[pipe])
            sb.prepare(state, pods_root)
            env = {"PATH": "/usr/local/bin:/usr/bin:/bin",
                   "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
                   "CUDA_VISIBLE_DEVICES": "0", "CUDA_MPS_PIPE_DIRECTORY": pipe}
            meta = directory / META_DIR
            started.append((state, proc.start((sys.executable, "-c", CLIENT), env, directory,
                                              meta / "logs" / "main.log",
                                              meta / "exit" / "main.0", state)))

        def log(state: sb.SandboxState) -> str:
            return (state.meta / "logs" / "main.log").read_text(errors="replace")

        # both hold a context at the same time: MPS serves them together
        try:
            _wait(lambda: all("ready" in log(s) for s, _ in started), 120)
        except AssertionError:
            raise AssertionError(_diagnose(mps, [log(s) for s, _ in started])) from None
        for state, _ in started:
            words = log(state).split()
            uid, gid = int(words[1]), int(words[2])
            assert (uid, gid) == (state.uid, state.gid)
            assert uid == sb.ID_BASE + 0 and gid >= sb.ID_BASE + sb.GPU_IDS
            assert words[3] == "1024.0"
        # The first ends; the second then computes again (a client in a PID namespace of its
        # own had its context torn down by another client's exit: the MPS server keys
        # clients by pid).
        (Path(started[0][0].root) / "release").write_text("")
        _wait(lambda: started[0][1].poll() is not None, 60)
        (Path(started[1][0].root) / "release").write_text("")
        _wait(lambda: started[1][1].poll() is not None, 60)
        codes = [p.poll() for _, p in started]
        assert codes == [0, 0], [log(s) for s, _ in started]
        assert "done 4096.0" in log(started[1][0]), log(started[1][0])
        assert started[0][0].gid != started[1][0].gid
    finally:
        for _, process in started:
            proc.kill_group(process.pgid)
        mps.stop_all()
        base = sb.mps_base(data_dir).parent
        if base.parent == Path("/run/gpushare"):
            shutil.rmtree(base, ignore_errors=True)
