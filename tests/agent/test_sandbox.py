"""The pod sandbox, end to end: the real API server, the agent as a `gpushare agent` process
(once with bubblewrap, once with the per-pod-user fallback), pods whose commands try to read
what they must not. Every refused read is also done by the test (the agent's user, root)
and succeeds, so each check can fail."""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from test_agent_e2e import NODE, NS, Cluster, wait_for

from gpushare.agent.runtime import sandbox as sb
from gpushare.kube.client import NODES, PODS, SECRETS

# Runs in the pod with the system's Python (stdlib only): each target read or listed, the
# agent's node endpoint asked without credentials, the API asked with the pod's own token.
PROBE = r"""
import json, os, ssl, sys, urllib.error, urllib.request
targets = json.loads(sys.argv[1])
out = {"uid": os.getuid(), "gid": os.getgid(), "cwd": os.getcwd()}
for name, path in targets["files"].items():
    try:
        if os.path.isdir(path):
            out[name] = "LISTED " + " ".join(sorted(os.listdir(path)))
        else:
            open(path, "rb").read(1)
            out[name] = "READ"
    except OSError as exc:
        out[name] = type(exc).__name__
insecure = ssl.create_default_context()
insecure.check_hostname = False
insecure.verify_mode = ssl.CERT_NONE
try:
    urllib.request.urlopen(targets["node_url"], context=insecure, timeout=10)
    out["node"] = 200
except urllib.error.HTTPError as exc:
    out["node"] = exc.code
except Exception as exc:
    out["node"] = repr(exc)
sa = os.environ.get("GPUSHARE_SERVICEACCOUNT_DIR",
                    "/var/run/secrets/kubernetes.io/serviceaccount")
out["sa_files"] = sorted(os.listdir(sa)) if os.path.isdir(sa) else None
if out["sa_files"]:
    token = open(os.path.join(sa, "token")).read()
    out["token"] = token
    out["namespace"] = open(os.path.join(sa, "namespace")).read()
    verified = ssl.create_default_context(cafile=os.path.join(sa, "ca.crt"))
    url = ("https://" + os.environ["KUBERNETES_SERVICE_HOST"] + ":"
           + os.environ["KUBERNETES_SERVICE_PORT"] + "/api/v1/namespaces/default/secrets")
    request = urllib.request.Request(url, headers={"Authorization": "Bearer " + token})
    try:
        urllib.request.urlopen(request, context=verified, timeout=10)
        out["secrets"] = 200
    except urllib.error.HTTPError as exc:
        out["secrets"] = exc.code
        out["secrets_message"] = json.loads(exc.read()).get("message", "")
out["env"] = dict(os.environ)
print("PROBE " + json.dumps(out), flush=True)
"""


class SandboxCluster(Cluster):
    def __init__(self, root: Path, mode: str) -> None:
        super().__init__(root)
        self.mode = mode

    def start_agent(self) -> None:
        self.agent = subprocess.Popen(
            [sys.executable, "-m", "gpushare.cli.main", "agent", "--kubeconfig",
             str(self.kubeconfig), "--node-name", NODE, "--gpus", "1xH100", "--data-dir",
             str(self.root / "agent"), "--heartbeat", "0.5", "--restart-backoff", "0.2",
             "--sandbox", self.mode],
            stdout=open(self.root / "agent.log", "ab"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
        )
        wait_for(lambda: (n := self.kube.get(NODES.item(NODE))) is not None and any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (n.get("status") or {}).get("conditions") or []), 30)

    def pod_dir(self, name: str) -> Path:
        return self.root / "agent" / "pods" / NS / name

    def admin_token(self) -> str:
        config = yaml.safe_load(self.kubeconfig.read_text())
        return str(config["users"][0]["user"]["token"])

    def probe(self, name: str, targets: dict[str, Any]) -> dict[str, Any]:
        self.create_pod(name, [{"name": "main", "command": [
            "/usr/bin/python3", "-c", PROBE, json.dumps(targets)]}])
        return self.probe_result(name)

    def probe_result(self, name: str) -> dict[str, Any]:
        pod = self.wait_phase(name, "Succeeded", "Failed", timeout=60)
        logs = self.kubectl("logs", name).stdout
        assert pod["status"]["phase"] == "Succeeded", logs
        line = next(ln for ln in logs.splitlines() if ln.startswith("PROBE "))
        return dict(json.loads(line[len("PROBE "):]))


@pytest.fixture(scope="module", params=[sb.BWRAP, sb.SETUID])
def cluster(request: pytest.FixtureRequest) -> Iterator[SandboxCluster]:
    # not under pytest's 0700 base directory: in setuid mode the pods' absolute paths
    # (HOME, the token directory) need crossable parents, as the agent's docs say
    root = Path(tempfile.mkdtemp(prefix=f"gpushare-sandbox-{request.param}-"))
    root.chmod(0o711)
    c = SandboxCluster(root, request.param)
    try:
        c.start_agent()
        yield c
    finally:
        if c.agent is not None:
            c.kill_agent(signal.SIGTERM)
        c.server.stop()
        shutil.rmtree(root, ignore_errors=True)


def _victim(cluster: SandboxCluster) -> Path:
    """A pod holding a file and a log line the other pods must not read."""
    directory = cluster.pod_dir("victim")
    if cluster.pod("victim") is None:
        cluster.create_pod("victim", [{"name": "main", "command": [
            "sh", "-c", "echo private > secret.txt; echo victim-log-line; sleep 600"]}])
        cluster.wait_phase("victim", "Running")
        wait_for(lambda: (directory / "secret.txt").exists(), 20)
    return directory


def test_a_pod_reads_nothing_of_the_agent_the_store_or_other_pods(
        cluster: SandboxCluster) -> None:
    victim = _victim(cluster)
    api = cluster.root / "api"
    node = cluster.kube.get(NODES.item(NODE)) or {}
    port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
    targets = {
        "admin_kubeconfig": str(api / "admin.kubeconfig"),
        "store": str(api / "state.db"),
        "tokens_file": str(api / "tokens.yaml"),
        "agent_data_dir": str(cluster.root / "agent"),
        "namespace_dir": str(cluster.root / "agent" / "pods" / NS),
        "other_pod_dir": str(victim),
        "other_pod_file": str(victim / "secret.txt"),
        "other_pod_log": str(victim / ".gpushare" / "logs" / "main" / "0.log"),
        "own_logs": str(cluster.pod_dir("intruder") / ".gpushare" / "logs"),
        "agent_environ": f"/proc/{cluster.agent.pid}/environ",  # type: ignore[union-attr]
    }
    # what the pod is refused, the agent's user can read: the refusals are the sandbox's
    for path in targets.values():
        if path.endswith("/logs"):
            continue  # the intruder's own, made when it starts
        target = Path(path)
        assert (os.listdir(target) if target.is_dir() else target.read_bytes()[:1]) is not None
    url = f"https://127.0.0.1:{port}/containerLogs/{NS}/victim/main"
    result = cluster.probe("intruder", {"files": targets, "node_url": url})

    refused = {name: result[name] for name in targets}
    # a listing may show the way to the pod's own directory (bwrap makes just that), no more
    on_the_way = {"agent_data_dir": "LISTED pods", "namespace_dir": "LISTED intruder"}
    assert all(outcome in ("PermissionError", "FileNotFoundError", on_the_way.get(name))
               for name, outcome in refused.items()), refused
    assert "victim" in os.listdir(targets["namespace_dir"])
    assert (victim / ".gpushare" / "logs" / "main" / "0.log").read_text().startswith(
        "victim-log-line")
    # the node endpoint is not even reachable from a pod on its own network (the node's
    # ports are closed to pods; without that it wants credentials: test_nodeserver.py)
    assert "ConnectionRefusedError" in str(result["node"]), result["node"]
    assert "victim-log-line" in cluster.kubectl("logs", "victim").stdout
    # an unprivileged user of its own, in its own directory
    assert result["uid"] >= sb.ID_BASE and result["gid"] >= sb.ID_BASE + sb.GPU_IDS
    assert Path(result["cwd"]) == cluster.pod_dir("intruder")
    victim_state = sb.load_state(victim)
    assert victim_state is not None and victim_state.mode == cluster.mode
    assert victim_state.uid != result["uid"] and victim_state.gid != result["gid"]


def test_a_pod_gets_its_own_token_with_its_service_accounts_rights_only(
        cluster: SandboxCluster) -> None:
    result = cluster.probe("token-user", {"files": {}, "node_url": "https://127.0.0.1:1/"})
    assert result["sa_files"] == ["ca.crt", "namespace", "token"]
    assert result["namespace"] == NS
    # the token authenticates (403 names the account, not 401) but grants nothing
    assert result["secrets"] == 403, result
    assert "system:serviceaccount:default:default" in result["secrets_message"]
    assert cluster.kube.list(SECRETS.collection(NS)) is not None  # the admin may
    admin = cluster.admin_token()
    assert result["token"] != admin
    assert admin not in json.dumps(result["env"])
    assert result["env"]["KUBERNETES_SERVICE_HOST"] == "10.96.0.1"  # the API's Service
    assert result["env"]["HOME"] == str(cluster.pod_dir("token-user"))
    assert all(not path or not path.startswith("/root") for path in
               result["env"]["PATH"].split(":"))


def test_automount_false_gives_no_token(cluster: SandboxCluster) -> None:
    body = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "no-token", "namespace": NS},
            "spec": {"nodeName": NODE, "restartPolicy": "Never",
                     "automountServiceAccountToken": False,
                     "containers": [{"name": "main", "image": "python", "command": [
                         "/usr/bin/python3", "-c", PROBE,
                         json.dumps({"files": {}, "node_url": "https://127.0.0.1:1/"})]}]}}
    cluster.kube.create(PODS.collection(NS), body)
    result = cluster.probe_result("no-token")
    assert result["sa_files"] is None
    assert sb.SA_ENV not in result["env"]


def test_the_node_and_the_pod_say_which_isolation_is_in_force(cluster: SandboxCluster) -> None:
    _victim(cluster)
    described = cluster.kubectl("describe", "node", NODE)
    assert described.returncode == 0, described.stderr
    assert f"gpushare.io/sandbox: {cluster.mode}" in described.stdout
    row = next(line for line in described.stdout.splitlines() if "PodSandbox" in line)
    assert "True" in row and ("Bubblewrap" if cluster.mode == sb.BWRAP else "PerPodUser") in row
    state = sb.load_state(cluster.pod_dir("victim"))
    assert state is not None
    pod = wait_for(lambda: (p := cluster.pod("victim")) and "gpushare.io/sandbox" in (
        p["metadata"].get("annotations") or {}) and p)
    assert pod["metadata"]["annotations"]["gpushare.io/sandbox"] == (
        f"{cluster.mode}: uid {state.uid} gid {state.gid}")


def test_exec_runs_as_the_pods_user_inside_its_sandbox(cluster: SandboxCluster) -> None:
    victim = _victim(cluster)
    done = cluster.kubectl("exec", "victim", "--", "sh", "-c",
                           f"id -u; cat secret.txt; cat {cluster.kubeconfig} 2>&1 || true")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    state = sb.load_state(victim)
    assert state is not None and lines[0] == str(state.uid)
    assert lines[1] == "private"
    assert cluster.admin_token() not in done.stdout  # hidden (bwrap) or refused (setuid)
    assert any(word in done.stdout for word in ("Permission denied", "No such file"))


def test_a_restarted_agent_keeps_the_ids_of_the_pods_it_adopts(cluster: SandboxCluster) -> None:
    victim = _victim(cluster)
    before = sb.load_state(victim)
    assert before is not None
    pgid = json.loads((victim / ".gpushare" / "state.json").read_text())[
        "containers"]["main"]["process"]["pgid"]
    cluster.kill_agent(signal.SIGKILL)
    cluster.start_agent()
    # adopted, not restarted: the same process group, the same ids, and a new pod gets another
    wait_for(lambda: cluster.kubectl("logs", "victim").returncode == 0, 30)
    assert sb.load_state(victim) == before
    assert json.loads((victim / ".gpushare" / "state.json").read_text())[
        "containers"]["main"]["process"]["pgid"] == pgid
    owners = {p.uids().real for p in psutil.process_iter() if _in_group(p, pgid)}
    assert before.uid in owners
    result = cluster.probe("after-restart", {"files": {}, "node_url": "https://127.0.0.1:1/"})
    assert result["gid"] != before.gid


def _in_group(process: psutil.Process, pgid: int) -> bool:
    try:
        return os.getpgid(process.pid) == pgid
    except (ProcessLookupError, PermissionError):
        return False


# --- the pure parts ---------------------------------------------------------------------------

def test_a_mode_that_is_not_one_is_refused_naming_the_flag() -> None:
    with pytest.raises(sb.SandboxError, match="--sandbox: 'chroot' is not one of"):
        sb.choose_policy("chroot", [])


def test_recorded_state_round_trips_and_a_bad_mode_is_refused() -> None:
    state = sb.SandboxState(sb.BWRAP, 200070, 200070, "/d/pods/ns/p", "p", ("/d",),
                            service_account=True, devices=("/dev/nvidia0",))
    assert sb.SandboxState.from_json(state.to_json()) == state
    with pytest.raises(ValueError, match="mode must be one of"):
        sb.SandboxState.from_json(json.dumps({**json.loads(state.to_json()), "mode": "x"}))


def test_ids_are_the_lowest_free_and_mps_clients_share_their_gpus_uid(tmp_path: Path) -> None:
    policy = sb.SandboxPolicy(sb.SETUID, "test")
    first = sb.new_state(policy, tmp_path / "ns" / "a", "a", set())
    assert first.uid == first.gid == sb.ID_BASE + sb.GPU_IDS
    taken = {sb.ID_BASE + sb.GPU_IDS, sb.ID_BASE + sb.GPU_IDS + 1}
    third = sb.new_state(policy, tmp_path / "ns" / "c", "c", taken, mps_gpu=3)
    assert third.gid == sb.ID_BASE + sb.GPU_IDS + 2 and third.uid == sb.ID_BASE + 3
    assert third.host_pid and not first.host_pid
    sb.save_state(first)
    assert sb.ids_in_use(tmp_path) == {first.gid}
    with pytest.raises(sb.SandboxError, match="no free pod id"):
        sb.allocate_id(set(range(sb.ID_BASE, sb.ID_BASE + sb.ID_COUNT)))


def test_image_paths_are_the_agents_choice_and_never_open_a_hidden_directory(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    tool = tmp_path / "venv" / "bin"
    tool.mkdir(parents=True)
    (data / "pods").mkdir(parents=True)
    chosen = tmp_path / "chosen"
    chosen.mkdir()
    paths = sb.image_paths([str(chosen), str(data / "pods"), str(tmp_path)], [str(data)])
    # what the operator chose is bound; the data dir and its parent are not
    assert str(chosen) in paths
    assert not any(p == str(tmp_path) or p.startswith(str(data)) for p in paths)
    # the agent's own installation is bound where the sandbox would hide it
    assert all(p in paths for p in sb.agent_image_paths() if sb._under_private(p))


def test_the_pods_path_leaves_out_home_directories() -> None:
    state = sb.SandboxState(sb.BWRAP, 200070, 200070, "/d/pods/ns/p", "p", ("/d",))
    env = sb.sandbox_env(state, {"PATH": "/root/.pyenv/shims:/d/bin:/usr/bin", "HOME": "/root"})
    assert env["PATH"] == "/usr/bin" and env["HOME"] == "/d/pods/ns/p"
    assert env["USER"] == "pod-200070" and env["TMPDIR"] == "/tmp"


def test_mps_pipes_leave_a_data_dir_other_users_cannot_reach(tmp_path: Path) -> None:
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    hidden_data = closed / "agent"
    base = sb.mps_base(hidden_data)
    try:
        assert base.parent.parent == Path("/run/gpushare") and base.name == "mps"
        assert sb.untraversable(base.parent) is None  # every user can cross to it
        assert sb.mps_base(hidden_data) == base  # the same data dir, the same place
    finally:
        shutil.rmtree(base.parent, ignore_errors=True)
    opened = Path(tempfile.mkdtemp(prefix="gpushare-open-"))
    try:
        opened.chmod(0o711)
        assert sb.mps_base(opened / "agent") == opened / "agent" / "mps"
    finally:
        shutil.rmtree(opened)


# --- the token, against the real API server -------------------------------------------------

def test_the_token_is_written_for_the_pods_gid_and_renewed_late_in_its_life(
        tmp_path: Path) -> None:
    from gpushare.agent.runtime.serviceaccount import ServiceAccountTokens
    from gpushare.cli.compose import api_server
    from gpushare.kube.client import KubeClient

    server = api_server(tmp_path / "api").start()
    try:
        kube = KubeClient.from_kubeconfig(str(tmp_path / "api" / "admin.kubeconfig"))
        pod = kube.create(PODS.collection(NS), {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "holder"},
            "spec": {"containers": [{"name": "c", "image": "x", "command": ["true"]}]}})
        events: list[tuple[str, str]] = []
        tokens = ServiceAccountTokens(kube, lambda _pod, reason, msg: events.append(
            (reason, msg)))
        assert tokens.wanted(pod)
        policy = sb.SandboxPolicy(sb.SETUID, "test")
        state = sb.new_state(policy, tmp_path / "pods" / NS / "holder", "holder", set())
        sb.prepare(state, tmp_path / "pods")
        assert tokens.write(pod, state) and events == []
        token = state.meta / sb.SA_DIR / "token"
        copy = Path(state.root) / sb.SA_COPY / "token"
        first = token.read_text()
        assert copy.read_text() == first and first.count(".") == 2  # a JWT
        assert (copy.stat().st_gid, copy.stat().st_mode & 0o777) == (state.gid, 0o640)
        claims = json.loads(base64.urlsafe_b64decode(first.split(".")[1] + "=="))
        assert claims["kubernetes.io"]["pod"]["uid"] == pod["metadata"]["uid"]
        assert not tokens.refresh(pod, state)  # young: kept
        old = token.stat().st_mtime - 3607 * 0.81
        os.utime(token, (old, old))
        assert tokens.refresh(pod, state)
        assert token.read_text() != first
        # a ServiceAccount that is gone: a Warning Event, no token
        gone = {**pod, "spec": {**pod["spec"], "serviceAccountName": "missing"}}
        assert not tokens.write(gone, state)
        assert events and events[0][0] == "FailedMount" and "missing" in events[0][1]
    finally:
        server.stop()


def test_only_an_mps_client_keeps_the_hosts_ipc_and_shared_memory(tmp_path: Path) -> None:
    pipe = tmp_path / "mps" / "gpu0" / "pipe"
    pipe.mkdir(parents=True)
    root = tmp_path / "pods" / NS / "p"
    client = sb.SandboxState(sb.BWRAP, sb.ID_BASE, sb.ID_BASE + 70, str(root), "p",
                             (str(tmp_path),), writable=(str(pipe),))
    argv = sb.launch_argv(client, ["/bin/true"], {"PATH": "/usr/bin"}, root)
    assert "--unshare-ipc" not in argv and "/dev/shm" in argv
    at = argv.index(str(pipe))  # bound read-write at its own path
    assert argv[at - 1:at + 2] == ["--bind", str(pipe), str(pipe)]
    plain = sb.SandboxState(sb.BWRAP, sb.ID_BASE + 71, sb.ID_BASE + 71, str(root), "p",
                            (str(tmp_path),))
    argv = sb.launch_argv(plain, ["/bin/true"], {"PATH": "/usr/bin"}, root)
    assert "--unshare-ipc" in argv and "/dev/shm" not in argv
    # the data directory is emptied before the pod's own directory is bound back
    assert argv.index(str(tmp_path)) < argv.index(str(root))


def test_mps_clients_stay_in_the_host_pid_namespace_and_others_get_their_own(
        tmp_path: Path) -> None:
    """The MPS server keys its clients by pid: a client in a PID namespace of its own would
    share small pids with other pods' clients."""
    policy = sb.SandboxPolicy(sb.BWRAP, "test")
    plain = sb.new_state(policy, tmp_path / "ns" / "a", "a", set())
    client = sb.new_state(policy, tmp_path / "ns" / "b", "b", {plain.gid}, mps_gpu=0)
    argv = ("/bin/true",)
    assert "--unshare-pid" in sb.launch_argv(plain, argv, {"PATH": "/bin"}, tmp_path)
    launched = sb.launch_argv(client, argv, {"PATH": "/bin"}, tmp_path)
    assert "--unshare-pid" not in launched
    assert sb.SandboxState.from_json(client.to_json()) == client


NOBODY = 65534


def test_an_agent_that_is_not_root_still_hides_the_data_dirs_with_bwrap(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The command line an agent running as `nobody` builds, run as `nobody`: its pods keep
    its user, so only the mount namespace stands between a pod and the agent's files (which
    that user may read outside the sandbox)."""
    base = Path(tempfile.mkdtemp(prefix="gpushare-userns-"))
    try:
        base.chmod(0o755)
        data = base / "agent"
        own, other = data / "pods" / NS / "own", data / "pods" / NS / "other"
        for directory in (own, other):
            directory.mkdir(parents=True)
        (other / "secret.txt").write_text("other pod's")
        for path in [data, *data.rglob("*")]:
            os.chown(path, NOBODY, NOBODY)
        monkeypatch.setattr(os, "geteuid", lambda: NOBODY)
        monkeypatch.setattr(os, "getegid", lambda: NOBODY)
        policy = sb.choose_policy("auto", [data])
        assert policy.mode == sb.BWRAP and policy.user_namespace
        assert "not root" in policy.describe()
        state = sb.new_state(policy, own, "own", set())
        assert (state.uid, state.gid) == (NOBODY, NOBODY) and sb.drop_privileges(state) == []
        script = f"cat {other / 'secret.txt'}; echo written > mine; id -u"
        argv = sb.launch_argv(state, ["/bin/sh", "-c", script], {"PATH": "/usr/bin:/bin"}, own)
        monkeypatch.undo()
        assert "--unshare-user" in argv
        as_nobody = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        outside = subprocess.run([*as_nobody, "cat", str(other / "secret.txt")],
                                 capture_output=True, text=True, check=False)
        assert outside.stdout == "other pod's"  # the agent's user reads it...
        inside = subprocess.run([*as_nobody, *argv], capture_output=True, text=True,
                                check=False)
        assert "No such file" in inside.stderr, inside  # ...its pod does not
        assert inside.stdout.strip() == str(NOBODY)
        assert (own / "mine").read_text() == "written\n"
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_exec_does_not_enter_a_run_that_is_not_in_its_sandbox_yet(tmp_path: Path) -> None:
    """Under bwrap the run's first process (bwrap itself) is in the host's namespaces until
    its child has entered the sandbox's: an exec then must wait, not nsenter the host's."""
    state = sb.SandboxState(sb.BWRAP, 200070, 200070, str(tmp_path), "p", ())
    # a run whose only process never leaves the host's namespaces (as bwrap before its child)
    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        wait_until = time.monotonic() + 10
        while sb.sandboxed_process(proc.pid) is None and time.monotonic() < wait_until:
            time.sleep(0.02)
        assert sb.sandboxed_process(proc.pid) == proc.pid  # it is the run's process ...
        assert sb.sandboxed_process(proc.pid, inside_only=True) is None  # ... not inside
        with pytest.raises(sb.SandboxNotEntered, match="has not entered its sandbox"):
            sb.enter_argv(state, proc.pid, ["id"])
    finally:
        proc.kill()
        proc.wait()
    with pytest.raises(sb.SandboxError, match="are gone"):
        sb.enter_argv(state, proc.pid, ["id"])


def test_a_gpu_pod_gets_the_device_nodes_of_its_gpus_only(tmp_path: Path) -> None:
    for name in ("nvidia0", "nvidia1", "nvidia2", "nvidiactl", "nvidia-uvm",
                 "nvidia-uvm-tools", "nvidia-modeset", "nvidia-caps", "null"):
        (tmp_path / name).touch()
    given = sb.gpu_devices([1], dev=str(tmp_path))
    assert sorted(Path(p).name for p in given) == [
        "nvidia-caps", "nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools", "nvidia1",
        "nvidiactl"]
    assert sorted(Path(p).name for p in sb.gpu_devices([0, 2], dev=str(tmp_path))) == [
        "nvidia-caps", "nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools", "nvidia0",
        "nvidia2", "nvidiactl"]


def test_no_other_nvidia_node_reaches_a_gpu_pods_dev(tmp_path: Path) -> None:
    """FAKE device nodes (character devices with /dev/null's numbers, no GPU here) named as
    a GPU node has them: only the pod's GPU and the control nodes are bound into its /dev;
    another GPU's node (``nvidia10`` is not ``nvidia1``) and an NVSwitch's are not."""
    dev = tmp_path / "fake-dev"
    dev.mkdir()
    null = os.stat("/dev/null").st_rdev
    for name in ("nvidia1", "nvidia10", "nvidia3", "nvidiactl", "nvidia-uvm",
                 "nvidia-uvm-tools", "nvidia-modeset", "nvidia-nvswitch0",
                 "nvidia-nvswitchctl", "nvidia-nvlink", "zero"):
        os.mknod(dev / name, 0o600 | 0o020000, null)
    (dev / "nvidia-caps").mkdir()
    given = sb.gpu_devices([1], dev=str(dev))
    assert sorted(Path(p).name for p in given) == [
        "nvidia-caps", "nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools", "nvidia1",
        "nvidiactl"]
    state = sb.SandboxState(sb.BWRAP, 200070, 200070, str(tmp_path / "pod"), "p", (),
                            devices=tuple(given))
    args = sb._bwrap_mounts(state, ["true"], {})
    bound = [args[i + 1] for i, a in enumerate(args) if a == "--dev-bind"
             and args[i + 1].startswith(str(dev))]
    assert sorted(bound) == sorted(given)
    assert args[args.index("--dev") + 1] == "/dev"  # a fresh /dev: no host node besides these
