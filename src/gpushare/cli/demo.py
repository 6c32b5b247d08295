"""``gpushare demo``: the three-team pattern, end to end on the embedded control plane.

One GPU belongs to ``ml-org``; ``nlp``, ``vision`` and ``recsys`` are each guaranteed
0.33 of it. The demo starts ``gpushare up`` in a scratch directory, lets ``nlp`` burst to
the whole GPU while the others are idle, then brings the others back and watches the
scheduler reclaim their guarantee: every team ends holding ``330m``. Each step is driven
with the real ``kubectl`` and checked; a step that does not happen in time fails the demo.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import typer

TEAMS = ("nlp", "vision", "recsys")


class DemoFailed(Exception):
    """A step of the demo did not reach its expected state in time."""


def register(app: typer.Typer) -> None:
    app.command()(demo)


def demo(
    data_dir: Annotated[
        Path | None, typer.Option(help="state directory (default: a fresh temporary one)")
    ] = None,
    gpus: Annotated[
        str | None,
        typer.Option(help="declare fake GPUs (default: probe NVML, else declare 1xL40S)"),
    ] = None,
    timeout: Annotated[float, typer.Option(help="seconds each step may take")] = 60.0,
    keep: Annotated[bool, typer.Option(help="leave the control plane running at the end")] = False,
) -> None:
    """Run the three-team pattern: burst to the whole GPU, then reclaim 330m each."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        typer.echo("error: the demo drives the control plane with kubectl; install it", err=True)
        raise typer.Exit(2)
    gpus = gpus or (None if _nvml_gpu_count() else "1xL40S")
    with _scratch_dir(data_dir) as root:
        try:
            with _control_plane(root, gpus, keep) as kubeconfig:
                _run_story(_Kubectl(kubectl, kubeconfig), timeout)
        except DemoFailed as failure:
            typer.secho(f"\nFAILED: {failure}", fg=typer.colors.RED, err=True)
            raise typer.Exit(1) from None
    typer.secho("\nOK: each team holds its guaranteed 330m of the GPU.", fg=typer.colors.GREEN)


# -- the story ---------------------------------------------------------------------------


def _run_story(k: _Kubectl, timeout: float) -> None:
    manifests = resources.files("gpushare.examples") / "three_teams"
    k.step("1. The platform engineer creates the queues: ml-org owns the GPU, teams 0.33 each")
    k.show("apply", "-f", str(manifests / "queues.yaml"))
    k.show("get", "nodes")

    k.step("2. nlp is alone: its 3-pod training job of 0.33 each bursts to the whole GPU")
    k.show("apply", "-f", str(manifests / "nlp-burst.yaml"))
    k.wait(timeout, "3 nlp pods running", lambda: k.running_in_queue("nlp") == 3)
    k.wait(timeout, "nlp allocated 990m", lambda: k.allocated("nlp") == "990m")
    k.show("get", "queues")
    k.show("get", "pods", "-o", "wide")

    k.step("3. vision and recsys come back and ask for their guaranteed 0.33")
    k.show("apply", "-f", str(manifests / "vision.yaml"), "-f", str(manifests / "recsys.yaml"))
    for team in TEAMS:
        k.wait(timeout, f"{team} running with 330m", lambda t=team: (
            k.running_in_queue(t) == 1 and k.allocated(t) == "330m"))
    k.show("get", "queues")
    k.show("get", "pods", "-o", "wide")
    k.show("get", "events", "--field-selector", "reason=Evict")

    k.step("4. Each pod runs as a process with its share of the GPU")
    k.show("logs", "vision-train")
    k.show("get", "pods", "-o", "custom-columns=" + ",".join((
        "NAME:.metadata.name",
        "QUEUE:.metadata.labels.kai\\.scheduler/queue",
        "PHASE:.status.phase",
        "GPUS:.metadata.annotations.gpushare\\.io/gpu-indices",
        "PORTION:.metadata.annotations.gpushare\\.io/gpu-portion",
        "GPU-MEMORY-MIB:.metadata.annotations.gpushare\\.io/gpu-memory-mib",
    )))


class _Kubectl:
    def __init__(self, binary: str, kubeconfig: Path) -> None:
        self.base = [binary, "--kubeconfig", str(kubeconfig)]

    def step(self, title: str) -> None:
        typer.secho(f"\n{title}", bold=True)

    def show(self, *args: str) -> None:
        typer.secho("$ kubectl " + " ".join(args), fg=typer.colors.CYAN)
        done = subprocess.run([*self.base, *args], capture_output=True, text=True, check=False)
        typer.echo((done.stdout + done.stderr).rstrip())
        if done.returncode != 0:
            raise DemoFailed(f"kubectl {' '.join(args)} exited {done.returncode}")

    def json(self, *args: str) -> dict[str, Any]:
        import orjson

        done = subprocess.run([*self.base, *args, "-o", "json"], capture_output=True,
                              check=False)
        return orjson.loads(done.stdout) if done.returncode == 0 else {}

    def running_in_queue(self, queue: str) -> int:
        pods = self.json("get", "pods", "-l", f"kai.scheduler/queue={queue}")
        return sum(1 for p in pods.get("items", [])
                   if p.get("status", {}).get("phase") == "Running"
                   and not p["metadata"].get("deletionTimestamp"))

    def allocated(self, queue: str) -> str | None:
        status = self.json("get", "queue", queue).get("status", {})
        return (status.get("allocated") or {}).get("nvidia.com/gpu")

    def wait(self, timeout: float, what: str, check: Callable[[], bool]) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                typer.echo(f"  ✓ {what}")
                return
            time.sleep(0.5)
        self.show("get", "pods", "-o", "wide")
        self.show("get", "events")
        raise DemoFailed(f"{what}: not reached within {timeout:.0f}s")


# -- the control plane -------------------------------------------------------------------


@contextlib.contextmanager
def _scratch_dir(data_dir: Path | None) -> Iterator[Path]:
    if data_dir is not None:
        data_dir.mkdir(parents=True, exist_ok=True)
        yield data_dir
        return
    with tempfile.TemporaryDirectory(prefix="gpushare-demo-") as tmp:
        yield Path(tmp)


@contextlib.contextmanager
def _control_plane(root: Path, gpus: str | None, keep: bool) -> Iterator[Path]:
    """Start ``gpushare up`` on a free port and yield its admin kubeconfig."""
    kubeconfig = root / "admin.kubeconfig"
    kubeconfig.unlink(missing_ok=True)
    args = [sys.executable, "-m", "gpushare.cli.main", "up", "--data-dir", str(root),
            "--port", "0"]
    if gpus:
        args += ["--gpus", gpus]
    log_path = root / "up.log"
    typer.secho("$ gpushare " + " ".join(args[3:]), fg=typer.colors.CYAN)
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(args, stdout=log_file, stderr=subprocess.STDOUT)
    try:
        _wait_for_node(proc, kubeconfig, log_path)
        yield kubeconfig
    finally:
        if keep:
            typer.echo(f"\ncontrol plane left running (pid {proc.pid}):"
                       f" export KUBECONFIG={kubeconfig}")
        else:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def _wait_for_node(proc: subprocess.Popen[bytes], kubeconfig: Path, log_path: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DemoFailed(f"gpushare up exited {proc.returncode}:\n{log_path.read_text()}")
        if kubeconfig.exists():
            done = subprocess.run(
                ["kubectl", "--kubeconfig", str(kubeconfig), "get", "nodes", "-o",
                 "jsonpath={.items[*].status.conditions[?(@.type=='Ready')].status}"],
                capture_output=True, text=True, check=False)
            if "True" in done.stdout:
                typer.echo(log_path.read_text().rstrip())
                return
        time.sleep(0.3)
    raise DemoFailed(f"no Ready node within 60s:\n{log_path.read_text()}")


def _nvml_gpu_count() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no library: a machine without GPUs
        return 0
