"""Attacks from inside a pod on what the node gives it: volume paths that lead out of the
pod through planted symbolic links, a fork bomb, and a process moving itself out of its
cgroup. Real mounts, cgroups and sandboxed processes (the agent runs as root here)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agent"))

from test_agent_e2e import NS, wait_for
from test_pod_limits_e2e import LimitsCluster

from gpushare.agent.pods.volumes import PodVolumes, VolumeError, mounts_under, unmount_all


class _NoValues:
    def config_map(self, namespace: str, name: str) -> None:
        return None

    def secret(self, namespace: str, name: str) -> None:
        return None


def _pod(mounts: list[dict], volumes: list[dict]) -> dict:
    return {"metadata": {"name": "p", "namespace": "t", "uid": uuid.uuid4().hex},
            "spec": {"containers": [{"name": "c", "volumeMounts": mounts}],
                     "volumes": volumes}}


@pytest.fixture()
def pod_dir(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "pod"
    directory.mkdir()
    yield directory
    unmount_all(directory)


def test_a_sub_path_planted_as_a_link_to_the_host_is_refused(pod_dir: Path) -> None:
    secret_dir = pod_dir.parent / "host-secret"
    secret_dir.mkdir()
    (secret_dir / "key").write_text("host only")
    pod = _pod([{"name": "x", "mountPath": "/data", "subPath": "evil"}],
               [{"name": "x", "emptyDir": {}}])
    volumes = PodVolumes(pod, pod_dir, _NoValues())
    source = volumes.source("x")
    source.mkdir(parents=True)
    (source / "evil").symlink_to(secret_dir)  # what a pod can write in its emptyDir
    with pytest.raises(VolumeError, match="subPath"):
        volumes.setup()
    assert not mounts_under(pod_dir / "data")
    assert not (pod_dir / "data" / "key").exists()


def test_a_mount_path_planted_as_a_link_out_of_the_pod_is_refused(pod_dir: Path) -> None:
    outside = pod_dir.parent / "outside"
    outside.mkdir()
    (pod_dir / "data").symlink_to(outside)  # the pod's directory is the pod's to write
    pod = _pod([{"name": "x", "mountPath": "/data/inner"}], [{"name": "x", "emptyDir": {}}])
    with pytest.raises(VolumeError, match="bind mount"):
        PodVolumes(pod, pod_dir, _NoValues()).setup()
    assert not (outside / "inner").exists()  # nothing made outside the pod as root
    assert not mounts_under(outside)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LimitsCluster]:
    c = LimitsCluster(tmp_path_factory.mktemp("runtime-attacks"))
    c.node = "attacks-node"
    c.start_agent_with()
    yield c
    if c.agent is not None:
        c.kill_agent(signal.SIGTERM)
    c.server.stop()


def _recorded_cgroup(cluster: LimitsCluster, pod: str) -> dict[str, str]:
    record = cluster.root / "agent" / "pods" / NS / pod / ".gpushare" / "cgroup.json"
    return json.loads(record.read_text())["cgroup"]["paths"]


def test_a_fork_bomb_stops_at_the_pids_limit_and_the_node_stays_usable(
        cluster: LimitsCluster) -> None:
    cluster.create("bomb", ["/bin/sh", "-c", "b() { b | b & }; b; sleep 30"])
    cluster.wait_phase("bomb", "Running", "Succeeded", "Failed", timeout=30)
    paths = wait_for(lambda: _recorded_cgroup(cluster, "bomb"), 10)
    events = Path(paths["pids"]) / "pids.events"
    child = Path(paths["pids"]) / "main" / "pids.events"
    wait_for(lambda: sum(int(p.read_text().split()[1]) for p in (events, child)
                         if p.exists()) > 0, 30)
    assert int((Path(paths["pids"]) / "pids.current").read_text()) <= 64
    assert subprocess.run(["true"], check=False).returncode == 0  # the node still forks
    cluster.create("after", ["/bin/sh", "-c", "echo still-working"])
    cluster.wait_phase("after", "Succeeded", timeout=30)


def test_a_pod_cannot_move_itself_out_of_its_cgroups(cluster: LimitsCluster) -> None:
    cluster.create("escape", ["/bin/sh", "-c", "sleep 300"], {"memory": "64Mi"})
    cluster.wait_phase("escape", "Running", timeout=30)
    paths = wait_for(lambda: _recorded_cgroup(cluster, "escape"), 10)
    parent = Path(paths["memory"]).parent  # the node's cgroup, above the pod's
    script = (f'for f in {parent}/cgroup.procs /sys/fs/cgroup/memory/cgroup.procs; do '
              f'if echo $$ > "$f" 2>/dev/null; then echo moved:"$f"; else echo refused; fi; '
              f'done; grep memory /proc/self/cgroup')
    done = subprocess.run(["/usr/bin/kubectl", "exec", "escape", "--", "/bin/sh", "-c", script],
                          env=dict(os.environ, KUBECONFIG=str(cluster.kubeconfig)),
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout.count("refused") == 2, done.stdout + done.stderr
    assert "moved:" not in done.stdout
    members = (Path(paths["memory"]) / "main" / "cgroup.procs").read_text().split()
    assert members  # the container's processes are still limited
    # the exec'd shell itself ran in the container's cgroup, not the agent's
    assert f"memory:{paths['memory'].split('/sys/fs/cgroup/memory', 1)[1]}/main" in done.stdout
