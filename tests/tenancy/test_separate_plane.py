"""Virtual clusters on a Kubernetes cluster: two `gpushare apiserver` processes, one standing
in for the host cluster's kube-apiserver (used only through plain Kubernetes API paths: no
``/clusters/``), one as the tenants' control plane, and `gpushare controllers` with a
``--kubeconfig`` for each. Three tenants made with `gpushare tenant create --kubeconfig
<host>`; each tenant's kubectl (the kubeconfig the controller keeps in the host Secret
``vc-<team>/vc-kubeconfig``) applies a Job, whose pod the tenant plane's own Job controller
makes, the syncer copies to the host namespace ``vc-<team>``, and the scheduler binds on an
agentless node with 330m of its GPU; each tenant sees only its own."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from tenancy_support import GPUSHARE, KUBECTL, QUEUES, Kubectl, wait_for

TEAMS = ("nlp", "vision", "recsys")
ONLY = ("pod-grouper", "scheduler", "queue-status", "podgroup-status", "node-lifecycle",
        "tenancy")


def _job(team: str, queue: str | None = None) -> str:
    labels = f"{{kai.scheduler/queue: {queue}}}" if queue else "{}"
    return f"""
apiVersion: batch/v1
kind: Job
metadata: {{name: {team}-train, namespace: default}}
spec:
  backoffLimit: 0
  template:
    metadata:
      labels: {labels}
      annotations: {{gpu-fraction: "0.33"}}
    spec:
      schedulerName: gpushare
      restartPolicy: Never
      containers:
      - {{name: train, image: python, command: ["python3", "-c", "print('hi')"]}}
"""


def _start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT)


def _serve(root: Path, name: str, procs: list[subprocess.Popen[bytes]]) -> Kubectl:
    """`gpushare apiserver` on a free port; kubectl with its admin kubeconfig once it serves."""
    data = root / name
    procs.append(_start([*GPUSHARE, "apiserver", "--data-dir", str(data), "--port", "0"],
                        root / f"{name}.log"))
    admin = Kubectl(data / "admin.kubeconfig")

    def serving() -> bool:
        assert procs[-1].poll() is None, (root / f"{name}.log").read_text()
        return (data / "admin.kubeconfig").exists() and admin.run(
            "get", "--raw", "/readyz", check=False).returncode == 0

    wait_for(serving, 60, f"the {name} API server serving")
    return admin


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[tuple[Path, Kubectl, Kubectl]]:
    assert shutil.which(KUBECTL), f"the tenancy tests drive the cluster with {KUBECTL}"
    root: Path = tmp_path_factory.mktemp("separate")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        host = _serve(root, "host", procs)
        plane = _serve(root, "plane", procs)
        host.apply(QUEUES % {"gpus": 1, "quota": 0.33})
        done = subprocess.run([*GPUSHARE, "node", "add", "box", "--gpus", "1xL40S",
                               "--no-taint", "--kubeconfig", str(host.kubeconfig)],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        procs.append(_start([*GPUSHARE, "controllers", "--kubeconfig", str(host.kubeconfig),
                             "--tenant-kubeconfig", str(plane.kubeconfig),
                             "--metrics-interval", "0", *(f"--only={c}" for c in ONLY)],
                            root / "controllers.log"))
        yield root, host, plane
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def _create(root: Path, host: Kubectl, team: str) -> Kubectl:
    out = root / f"{team}.kubeconfig"
    done = subprocess.run([*GPUSHARE, "tenant", "create", team, "--queue", team,
                           "--kubeconfig", str(host.kubeconfig),
                           "--data-dir", str(root / "no-data-dir"), "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return Kubectl(out)


def test_three_tenants_on_a_separate_tenant_plane(clusters):
    root, host, plane = clusters
    tenants = {team: _create(root, host, team) for team in TEAMS}
    plane_server = yaml.safe_load(plane.kubeconfig.read_text())["clusters"][0]["cluster"][
        "server"]
    for team, kubectl in tenants.items():
        server = yaml.safe_load(kubectl.kubeconfig.read_text())["clusters"][0]["cluster"][
            "server"]
        assert server == f"{plane_server}/clusters/{team}"
        kubectl.apply(_job(team))

    def all_bound():
        pods = host.json("get", "pods", "-A", "-l", "tenancy.gpushare.io/tenant")["items"]
        return (len(pods) == 3 and all(p["spec"].get("nodeName") == "box" for p in pods)
                and pods)

    pods = wait_for(all_bound, 90, "three host pods bound to the one node")
    assert sorted(p["metadata"]["namespace"] for p in pods) == sorted(f"vc-{t}" for t in TEAMS)
    for team in TEAMS:
        wait_for(lambda t=team: (host.json("get", "queue", t).get("status") or {})
                 .get("allocated", {}).get("nvidia.com/gpu") == "330m", 30, f"{team} 330m")

    for team, kubectl in tenants.items():
        mine = kubectl.json("get", "pods", "-A")["items"]
        assert len(mine) == 1 and mine[0]["metadata"]["name"].startswith(f"{team}-train-")
        assert [j["metadata"]["name"] for j in kubectl.json("get", "jobs", "-A")["items"]] == [
            f"{team}-train"]
        wait_for(lambda k=kubectl: k.json("get", "pods")["items"][0]["spec"].get("nodeName")
                 == "box", 30, f"{team}'s pod bound in its cluster")
        assert mine[0]["metadata"]["labels"]["kai.scheduler/queue"] == team
        # `get --raw` keeps the server URL's path (kubectl 1.37); a client that drops it
        # (older kubectl's --raw) reaches the bare server, where the token's home cluster
        # (the one it was requested in) serves it
        raw = kubectl.run("get", "--raw", "/api/v1/namespaces/default/pods").stdout
        assert [p["metadata"]["name"] for p in yaml.safe_load(raw)["items"]] == [
            mine[0]["metadata"]["name"]]
        bare = kubectl.json("--server", plane_server, "get", "pods")["items"]
        assert [p["metadata"]["name"] for p in bare] == [mine[0]["metadata"]["name"]]
        # queue pinning by the tenant plane's admission (the policy mirrored there)
        other = "vision" if team != "vision" else "nlp"
        refused = kubectl.run("apply", "-f", "-", stdin=_job(f"{team}-x", queue=other),
                              check=False)
        assert refused.returncode != 0 and other in refused.stderr, refused.stderr
        # logs and exec: the tenant plane does not reach the host's kubelets, and says so
        logs = kubectl.run("logs", mine[0]["metadata"]["name"], check=False)
        assert logs.returncode != 0 and "not served here" in logs.stderr, logs.stderr
        # the tenant's token is nothing on the host
        denied = kubectl.run("--server", _server(host), "--insecure-skip-tls-verify=true",
                             "get", "pods", check=False)
        assert denied.returncode != 0 and "Unauthorized" in denied.stderr, denied.stderr

    table = host.run("get", "vc").stdout.splitlines()
    assert "LOGS/EXEC" in table[0]
    assert all("HostAdminOnly" in row for row in table[1:]) and len(table) == 4
    vc = host.json("get", "vc", "nlp")
    assert vc["status"]["endpoint"] == f"{plane_server}/clusters/nlp"
    assert {"type": "LogsAndExec", "status": "False"}.items() <= vc["status"]["conditions"][
        0].items()

    # `gpushare tenant kubeconfig` reads the kept kubeconfig, at the address asked for
    again = subprocess.run([*GPUSHARE, "tenant", "kubeconfig", "nlp", "--kubeconfig",
                            str(host.kubeconfig), "--data-dir", str(root / "no-data-dir"),
                            "--server", "https://localhost:1234"],
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr
    assert yaml.safe_load(again.stdout)["clusters"][0]["cluster"]["server"] == \
        "https://localhost:1234/clusters/nlp"
    bad = subprocess.run([*GPUSHARE, "tenant", "kubeconfig", "nlp", "--kubeconfig",
                          str(host.kubeconfig), "--user", "bob"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "--user" in bad.stderr, bad.stderr

    # What each server holds: the host only its own (root) objects, the tenant plane the
    # three tenants' clusters.
    assert _clusters(root / "host") == {"root"}
    assert _clusters(root / "plane") == {"root", *TEAMS}


def test_deleting_a_tenant_clears_both_servers(clusters):
    root, host, plane = clusters
    kubectl = _create(root, host, "gone")
    kubectl.run("create", "configmap", "left", "--from-literal=a=b")
    host.run("delete", "vc", "gone", "--wait=false")
    wait_for(lambda: host.run("get", "vc", "gone", check=False).returncode != 0, 60,
             "the VirtualCluster gone")
    assert host.run("get", "namespace", "vc-gone", check=False).returncode != 0
    assert plane.run("get", "vc", "gone", check=False).returncode != 0
    wait_for(lambda: "gone" not in _clusters(root / "plane"), 30, "the tenant's objects gone")


def _server(kubectl: Kubectl) -> str:
    return str(yaml.safe_load(kubectl.kubeconfig.read_text())["clusters"][0]["cluster"][
        "server"])


def _clusters(data: Path) -> set[str]:
    db = sqlite3.connect(f"file:{data / 'state.db'}?mode=ro", uri=True)
    try:
        return {row[0] for row in db.execute("SELECT DISTINCT cluster FROM objects")}
    finally:
        db.close()
