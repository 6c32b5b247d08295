"""``gpushare demo``: the three-team pattern, end to end on the embedded control plane.

One GPU belongs to ``ml-org``; ``nlp``, ``vision`` and ``recsys`` are each guaranteed
0.33 of it, and each has a virtual cluster of its own. The demo starts ``gpushare up`` in
a scratch directory; each team works only in its own cluster with its own kubeconfig.
``nlp`` bursts to the whole GPU while the others are idle, then the others come back and
the scheduler reclaims their guarantee: every team ends holding ``330m``, and each sees
only its own pods. Each step is driven with the real ``kubectl`` and checked against the
API; a step that does not happen in time fails the demo (exit 1).

When the agent's Node reports real GPUs and an enforcement (``gpushare.io/enforcement``),
the teams' pods run a bf16 matmul loop (``three_teams/matmul.py``) instead of sleeping; the
demo then measures each team's share of the summed rate beside its quota (step 5) and
shows a pod allocating past its memory share stopped by the enforcement while the others
keep their rate (step 6). With declared GPUs those steps are skipped.
"""

from __future__ import annotations

import contextlib
import fcntl
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from functools import partial
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import typer

from gpushare.api.contracts import GPU_RESOURCE
from gpushare.api.objects import Meta
from gpushare.cli.demo_gpu import (
    ENFORCEMENT,
    gpu_manifest,
    judge_shares,
    kept_rate,
    parse_rates,
    real_enforcement,
    shares,
    stopped_by_enforcement,
)
from gpushare.tools import ToolMissing, require_tool

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
    """Run the three-team pattern: a virtual cluster per team, burst, then reclaim 330m each."""
    try:
        kubectl = require_tool("kubectl")
    except ToolMissing as missing:
        typer.echo(f"error: the demo drives the control plane with kubectl: {missing}", err=True)
        raise typer.Exit(2) from None
    if data_dir is not None:
        refusal = _unusable(data_dir)
        if refusal:
            typer.secho(f"error: {refusal}", fg=typer.colors.RED, err=True)
            raise typer.Exit(2)
    gpus = gpus or (None if _nvml_gpu_count() else "1xL40S")
    if keep and data_dir is None:
        data_dir = Path(tempfile.mkdtemp(prefix="gpushare-demo-"))
    with _scratch_dir(data_dir) as root:
        try:
            with _control_plane(root, gpus, keep) as kubeconfig:
                host = _Kubectl(kubectl, kubeconfig, "platform")
                node = (host.json("get", "nodes").get("items") or [{}])[0]
                enforcement = real_enforcement(node)
                manifests = _Manifests(root, enforcement is not None)
                if enforcement is None:
                    typer.echo("The node's GPUs are declared (enforcement: "
                               f"{_annotation(node, ENFORCEMENT)}): the GPU steps (a real "
                               "matmul per team, measured shares, an over-share pod) are "
                               "skipped.")
                else:
                    typer.secho(f"Real GPU on node {Meta.of(node).name}: enforcement in "
                                f"force (from the Node's {ENFORCEMENT}): {enforcement}",
                                bold=True)
                tenants = _run_story(host, manifests, root, timeout)
                if enforcement is not None:
                    rates = _measure_shares(host, tenants, timeout)
                    _over_share_pod(host, tenants, manifests, node, rates, timeout)
                if keep:
                    typer.echo("\nExplore each team's own cluster:")
                    for team in TEAMS:
                        path = tenants[team].kubeconfig
                        typer.echo(f"  KUBECONFIG={path} kubectl get pods,nodes,queues")
        except DemoFailed as failure:
            typer.secho(f"\nFAILED: {failure}", fg=typer.colors.RED, err=True)
            raise typer.Exit(1) from None
    typer.secho("\nOK: three virtual clusters, one GPU, each team holds its guaranteed 330m.",
                fg=typer.colors.GREEN)


# -- the story ---------------------------------------------------------------------------


def _run_story(host: _Kubectl, manifests: _Manifests, root: Path,
               timeout: float) -> dict[str, _Kubectl]:
    host.step("1. The platform engineer creates the queues (ml-org owns the GPU, each team is "
              "guaranteed 0.33) and a virtual cluster per team")
    host.show("apply", "-f", manifests.path("queues.yaml"))
    host.show("apply", "-f", manifests.path("virtualclusters.yaml"))
    for team in TEAMS:
        host.wait(timeout, f"virtual cluster {team} Ready", partial(
            lambda t: host.json("get", "virtualcluster", t).get("status", {}).get("phase")
            == "Ready", team))
    tenants = {team: _Kubectl(host.binary, _tenant_kubeconfig(root, team, host.kubeconfig),
                              team) for team in TEAMS}
    host.show("get", "virtualclusters")
    host.show("get", "nodes")

    nlp = tenants["nlp"]
    nlp.step("2. nlp, alone, runs its 3-pod training job (0.33 GPU each) in its own cluster: "
             "it bursts to the whole GPU")
    nlp.show("apply", "-f", manifests.path("nlp-burst.yaml", "nlp"))
    nlp.wait(timeout, "3 nlp pods running in nlp's cluster", lambda: nlp.running() == 3)
    host.wait(timeout, "host queue nlp allocated 990m", lambda: host.allocated("nlp") == "990m")
    for team in ("vision", "recsys"):
        host.wait(timeout, f"{team} sees no pods",
                  partial(lambda t: tenants[t].pod_names() == [], team))
    nlp.show("get", "pods", "-o", "wide")
    host.show("get", "queues")

    host.step("3. vision and recsys apply their 0.33 pod, each in its own cluster")
    tenants["vision"].show("apply", "-f", manifests.path("vision.yaml", "vision"))
    tenants["recsys"].show("apply", "-f", manifests.path("recsys.yaml", "recsys"))
    for team in TEAMS:
        host.wait(timeout, f"{team} holds 330m of the GPU", partial(
            lambda t: host.allocated(t) == "330m" and tenants[t].running() == 1, team))
    for team in ("vision", "recsys"):
        tenant = tenants[team]
        tenant.wait(timeout, f"{team} sees exactly its own pod",
                    partial(lambda k, t: k.pod_names() == [f"{t}-train"], tenant, team))
    nlp.wait(timeout, "nlp sees only its own job's pods", lambda: all(
        name.startswith("nlp-train-") for name in nlp.pod_names()) and nlp.pod_names() != [])
    host.show("get", "queues")
    host.show("get", "pods", "-A", "-o", "wide")
    host.show("get", "events", "-A", "--field-selector", "reason=Evict")

    host.step("4. Inside each cluster: its own pods, its logs, its share of the node, its "
              "queue")
    for team in TEAMS:
        tenant = tenants[team]
        tenant.show("get", "pods", "-o", "wide")
        tenant.show("get", "nodes", "-o", "custom-columns=" + ",".join((
            "NAME:.metadata.name",
            "GPU-SHARE:.status.allocatable.nvidia\\.com/gpu",
            "GPU-USED:.metadata.annotations.tenancy\\.gpushare\\.io/gpu-allocated",
            "PRODUCT:.metadata.labels.nvidia\\.com/gpu\\.product")))
        tenant.show("get", "queues")
    tenants["vision"].wait(timeout, "vision's logs reach its cluster", lambda: (
        "vision step on GPU" in tenants["vision"].output("logs", "vision-train")))
    tenants["vision"].show("logs", "vision-train")
    host.show("get", "virtualclusters")
    return tenants


# -- the GPU steps (a node with a real GPU only) ------------------------------------------


class _Manifests:
    """The example manifests; on a real GPU the teams' pods run the matmul worker."""

    def __init__(self, root: Path, gpu: bool) -> None:
        self.source = resources.files("gpushare.examples") / "three_teams"
        self.root = root / "manifests"
        self.gpu = gpu
        self.worker = str(self.source / "matmul.py")

    def path(self, name: str, team: str | None = None, extra: tuple[str, ...] = ()) -> str:
        if not self.gpu or team is None:
            return str(self.source / name)
        self.root.mkdir(parents=True, exist_ok=True)
        target = self.root / name
        target.write_text(gpu_manifest((self.source / name).read_text(), sys.executable,
                                       self.worker, team, extra))
        return str(target)


def _annotation(obj: dict[str, Any], key: str) -> str | None:
    return Meta.of(obj).annotations.get(key)


def _running_pod(tenant: _Kubectl) -> str | None:
    names = sorted(Meta.of(p).name for p in tenant.pods()
                   if p.get("status", {}).get("phase") == "Running")
    return names[0] if names else None


def _fresh_rates(tenants: dict[str, _Kubectl], pods: dict[str, str], timeout: float,
                 what: str, count: int = 3) -> dict[str, float]:
    """The median of ``count`` rate lines each pod prints from now on."""
    seen = {t: len(parse_rates(tenants[t].output("logs", pods[t]))) for t in pods}
    rates: dict[str, float] = {}

    def ready() -> bool:
        for team, pod in pods.items():
            new = parse_rates(tenants[team].output("logs", pod))[seen[team]:]
            if len(new) < count:
                return False
            rates[team] = statistics.median(new[-count:])
        return True

    next(iter(tenants.values())).wait(timeout, what, ready)
    return rates


def _measure_shares(host: _Kubectl, tenants: dict[str, _Kubectl],
                    timeout: float) -> dict[str, tuple[str, float]]:
    host.step("5. The measured share of the GPU: each team's matmul rate (from its pod's log, "
              "read through its own cluster) beside its 0.33 quota")
    pods = {}
    for team in TEAMS:
        name = _running_pod(tenants[team])
        if name is None:
            raise DemoFailed(f"{team} has no running pod to measure")
        pods[team] = name
    rates = _fresh_rates(tenants, pods, timeout, "3 fresh rate lines from each team's pod")
    quotas = dict.fromkeys(TEAMS, 0.33)
    measured = shares(rates)
    for team in TEAMS:
        typer.echo(f"  {team:<7} {pods[team]:<18} {rates[team]:7.1f} TFLOP/s   share "
                   f"{measured[team]:.2f}   quota {quotas[team]:.2f}")
    typer.echo(f"  total   {sum(rates.values()):7.1f} TFLOP/s")
    problems = judge_shares(rates, quotas)
    if problems:
        raise DemoFailed("measured shares off their quotas: " + "; ".join(problems))
    typer.echo("  ✓ every team's measured share is within 0.10 of its quota's share")
    return {team: (pods[team], rates[team]) for team in TEAMS}


def _over_share_pod(host: _Kubectl, tenants: dict[str, _Kubectl], manifests: _Manifests,
                    node: dict[str, Any], before: dict[str, tuple[str, float]],
                    timeout: float) -> None:
    memory = int(Meta.of(node).labels.get("nvidia.com/gpu.memory") or 0)
    if memory <= 0:
        raise DemoFailed("the Node has no nvidia.com/gpu.memory label")
    ask = int(memory * 0.6)
    vision = tenants["vision"]
    host.step(f"6. vision replaces its pod by one that, with 0.33 of the GPU (~{memory * 0.33:.0f}"
              f" MiB), allocates {ask} MiB: the enforcement stops it, the others keep their "
              "rate")
    vision.show("apply", "-f", manifests.path("vision-greedy.yaml", "vision",
                                               ("--alloc-mib", str(ask))))
    vision.show("delete", "pod", "vision-train", "--wait=false")
    verdict: dict[str, str] = {}

    def stopped() -> bool:
        pod = vision.json("get", "pod", "vision-greedy")
        how = stopped_by_enforcement(pod, vision.output("logs", "vision-greedy"))
        if how:
            verdict["how"] = how
        return how is not None

    vision.wait(timeout * 2, "vision-greedy stopped by the enforcement", stopped)
    typer.echo(f"  vision-greedy: {verdict['how']}")
    vision.show("get", "pod", "vision-greedy")
    vision.show("logs", "vision-greedy")
    vision.show("get", "events", "--field-selector", "involvedObject.name=vision-greedy")
    others = {t: before[t][0] for t in ("nlp", "recsys")}
    after = _fresh_rates(tenants, others, timeout, "3 fresh rate lines from nlp and recsys")
    for team, pod in others.items():
        typer.echo(f"  {team:<7} {pod:<18} {before[team][1]:7.1f} -> {after[team]:7.1f} TFLOP/s")
        if not kept_rate(before[team][1], after[team]):
            raise DemoFailed(f"{team} lost its rate: {before[team][1]} -> {after[team]} TFLOP/s")
    typer.echo("  ✓ nlp and recsys kept their rate")


def _tenant_kubeconfig(root: Path, team: str, admin: Path) -> Path:
    path = root / "tenants" / f"{team}.kubeconfig"
    done = subprocess.run([sys.executable, "-m", "gpushare.cli.main", "tenant", "kubeconfig",
                           team, "--data-dir", str(root), "--kubeconfig", str(admin),
                           "-o", str(path)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise DemoFailed(f"gpushare tenant kubeconfig {team}: {done.stderr}")
    typer.secho(f"$ gpushare tenant kubeconfig {team} -o {path}", fg=typer.colors.CYAN)
    return path


class _Kubectl:
    def __init__(self, binary: str, kubeconfig: Path, who: str) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig
        self.who = who
        self.base = [binary, "--kubeconfig", str(kubeconfig)]

    def step(self, title: str) -> None:
        typer.secho(f"\n{title}", bold=True)

    def show(self, *args: str) -> None:
        prompt = "$ kubectl " if self.who == "platform" else f"{self.who}$ kubectl "
        typer.secho(prompt + " ".join(args), fg=typer.colors.CYAN)
        done = subprocess.run([*self.base, *args], capture_output=True, text=True, check=False)
        typer.echo((done.stdout + done.stderr).rstrip())
        if done.returncode != 0:
            raise DemoFailed(f"kubectl {' '.join(args)} ({self.who}) exited {done.returncode}")

    def output(self, *args: str) -> str:
        done = subprocess.run([*self.base, *args], capture_output=True, text=True, check=False)
        return done.stdout

    def json(self, *args: str) -> dict[str, Any]:
        import orjson

        done = subprocess.run([*self.base, *args, "-o", "json"], capture_output=True,
                              check=False)
        return orjson.loads(done.stdout) if done.returncode == 0 else {}

    def pods(self) -> list[dict[str, Any]]:
        return [p for p in self.json("get", "pods", "-A").get("items", [])
                if not Meta.of(p).deleting]

    def pod_names(self) -> list[str]:
        return sorted(Meta.of(p).name for p in self.pods())

    def running(self) -> int:
        return sum(1 for p in self.pods() if p.get("status", {}).get("phase") == "Running")

    def allocated(self, queue: str) -> str | None:
        status = self.json("get", "queue", queue).get("status", {})
        return (status.get("allocated") or {}).get(GPU_RESOURCE)

    def wait(self, timeout: float, what: str, check: Callable[[], bool]) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                typer.echo(f"  ✓ {what}")
                return
            time.sleep(0.5)
        self.show("get", "pods", "-A", "-o", "wide")
        self.show("get", "events", "-A")
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


def _unusable(root: Path) -> str | None:
    """Why the demo cannot use `root`, or None: a control plane runs there (its lock is
    held), or an earlier run left its state (the demo's story needs an empty cluster).
    Nothing in `root` is touched."""
    from gpushare.apiserver.http.server import DB_NAME, LOCK_NAME

    lock = root / LOCK_NAME
    if lock.exists():
        with lock.open("a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                pid_file = root / "demo.pid"
                pid = pid_file.read_text().strip() if pid_file.exists() else ""
                stop = f"kill -INT {pid}" if pid else "stop its gpushare up (Ctrl-C)"
                return (f"{root} is in use by a running control plane; the demo leaves it "
                        f"alone. Stop it first ({stop}) or choose another --data-dir.")
    if (root / DB_NAME).exists():
        return (f"{root} holds the state of an earlier run ({root / DB_NAME}); the demo needs "
                "an empty cluster: remove the directory or choose another --data-dir "
                "(the demo's control plane, once stopped, can still be started there with "
                f"`gpushare up --data-dir {root}`).")
    return None


@contextlib.contextmanager
def _control_plane(root: Path, gpus: str | None, keep: bool) -> Iterator[Path]:
    """Start ``gpushare up`` on a free port and yield its admin kubeconfig.

    The control plane's lock is taken before anything in `root` is removed or truncated,
    and let go just before ``gpushare up`` takes it."""
    from gpushare.apiserver.http.server import LOCK_NAME

    kubeconfig = root / "admin.kubeconfig"
    args = [sys.executable, "-m", "gpushare.cli.main", "up", "--data-dir", str(root),
            "--port", "0"]
    if gpus:
        args += ["--gpus", gpus]
    log_path = root / "up.log"
    with (root / LOCK_NAME).open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise DemoFailed(_unusable(root) or f"{root} is in use") from None
        kubeconfig.unlink(missing_ok=True)
        log_file = log_path.open("wb")
    typer.secho("$ gpushare " + " ".join(args[3:]), fg=typer.colors.CYAN)
    with log_file:
        proc = subprocess.Popen(args, stdout=log_file, stderr=subprocess.STDOUT)
    try:
        _wait_for_node(proc, kubeconfig, log_path)
        yield kubeconfig
    finally:
        if keep:
            (root / "demo.pid").write_text(str(proc.pid))
            typer.echo(f"\ncontrol plane left running (pid {proc.pid}, in {root}):"
                       f" export KUBECONFIG={kubeconfig}")
            typer.echo(f"stop it with: kill -INT {proc.pid}   (its state stays in {root}: "
                       f"`gpushare up --data-dir {root}` starts it again)")
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
                [require_tool("kubectl"), "--kubeconfig", str(kubeconfig), "get", "nodes", "-o",
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
