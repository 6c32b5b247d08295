"""Volumes through the API with a real `gpushare agent` process: each kind's files and
modes as the pod's user sees them in its sandbox, a missing source holding the pod in
ContainerCreating with FailedMount, configMap updates, emptyDir sizeLimit eviction, and no
mount left behind."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_agent_e2e import NS, wait_for
from test_pod_limits_e2e import LimitsCluster

from gpushare.agent.pods.volumes import mounts_under, unmount_all
from gpushare.kube.client import CONFIGMAPS, EVENTS, PODS, SECRETS

SCRIPT = """
set -e
show() { echo "$1 $(stat -L -c '%a' "$2") $(cat "$2" | tr '\\n' '|')"; }
show cm-a cm/a.txt
show cm-b cm/nested/b
show secret secret/password
show label downward/labels
show projected-cm projected/conf
test -s projected/token && echo token-present
touch scratch/ok && echo scratch-writable
echo memory $(stat -f -c '%T' mem)
if touch cm-ro/x 2>/dev/null; then echo ro-writable; else echo ro-refused; fi
echo ready
sleep 120
"""


def _volume_pod(name: str, cm: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "nodeName": "volumes-node", "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "containers": [{
            "name": "main", "image": "busybox", "command": ["/bin/sh", "-c", SCRIPT],
            "volumeMounts": [
                {"name": "cm", "mountPath": "/cm"},
                {"name": "cm", "mountPath": "/cm-ro", "readOnly": True},
                {"name": "secret", "mountPath": "/secret"},
                {"name": "downward", "mountPath": "/downward"},
                {"name": "projected", "mountPath": "/projected"},
                {"name": "scratch", "mountPath": "/scratch"},
                {"name": "mem", "mountPath": "/mem"},
            ]}],
        "volumes": [
            {"name": "cm", "configMap": {"name": cm, "items": [
                {"key": "a", "path": "a.txt"}, {"key": "b", "path": "nested/b", "mode": 0o600}],
                "defaultMode": 0o640}},
            {"name": "secret", "secret": {"secretName": "creds", "defaultMode": 0o400}},
            {"name": "downward", "downwardAPI": {"items": [
                {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
            {"name": "projected", "projected": {"sources": [
                {"configMap": {"name": cm, "items": [{"key": "a", "path": "conf"}]}},
                {"serviceAccountToken": {"audience": "vault", "expirationSeconds": 3600,
                                         "path": "token"}}]}},
            {"name": "scratch", "emptyDir": {}},
            {"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
        ]}
    spec.update(extra or {})
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": {"app": "vol"}},
            "spec": spec}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LimitsCluster]:
    c = LimitsCluster(tmp_path_factory.mktemp("volumes-e2e"))
    c.node = "volumes-node"
    c.start_agent_with("--volume-refresh", "1")
    yield c
    if c.agent is not None:
        c.kill_agent(signal.SIGTERM)
    c.server.stop()
    unmount_all(c.root)  # pods left to a next agent keep their mounts: not the test's


def _config_map(cluster: LimitsCluster, name: str, data: dict[str, str]) -> None:
    cluster.kube.create(CONFIGMAPS.collection(NS), {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})


def _log(cluster: LimitsCluster, pod: str) -> str:
    return cluster.kubectl("logs", pod).stdout


def test_each_volume_kind_is_mounted_with_its_files_and_modes(cluster: LimitsCluster) -> None:
    _config_map(cluster, "conf", {"a": "alpha", "b": "beta"})
    cluster.kube.create(SECRETS.collection(NS), {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"},
        "stringData": {"password": "hunter2"}})
    cluster.kube.create(PODS.collection(NS), _volume_pod("vols", "conf"))
    cluster.wait_phase("vols", "Running", timeout=30)
    out = wait_for(lambda: "ready" in (text := _log(cluster, "vols")) and text, 30)
    lines = out.splitlines()
    assert "cm-a 640 alpha" in lines
    assert "cm-b 600 beta" in lines
    assert "secret 400 hunter2" in lines
    assert 'label 644 app="vol"' in lines
    assert "projected-cm 644 alpha" in lines
    assert "token-present" in lines and "scratch-writable" in lines
    assert "memory tmpfs" in lines
    assert "ro-refused" in lines

    # an update of the configMap reaches the mounted files
    cluster.kube.merge_patch(CONFIGMAPS.item("conf", NS), {"data": {"a": "changed"}})
    directory = cluster.root / "agent" / "pods" / NS / "vols"
    wait_for(lambda: (directory / "cm" / "a.txt").read_text() == "changed", 30)
    wait_for(lambda: (directory / "projected" / "conf").read_text() == "changed", 30)


def test_a_missing_configmap_holds_the_pod_in_container_creating(cluster: LimitsCluster) -> None:
    cluster.kube.create(PODS.collection(NS), _volume_pod("waits", "later"))

    def failed_mount() -> bool:
        return any(e["reason"] == "FailedMount" and e["involvedObject"]["name"] == "waits"
                   and 'configmap "later" not found' in e["message"]
                   for e in cluster.kube.list(EVENTS.collection(NS))["items"])

    wait_for(failed_mount, 30)
    pod = cluster.pod("waits")
    assert pod is not None and pod["status"]["phase"] == "Pending"
    waiting = pod["status"]["containerStatuses"][0]["state"]["waiting"]
    assert waiting["reason"] == "ContainerCreating"
    _config_map(cluster, "later", {"a": "1", "b": "2"})
    cluster.wait_phase("waits", "Running", timeout=30)


def test_an_empty_dir_past_its_size_limit_is_evicted(cluster: LimitsCluster) -> None:
    cluster.create_raw({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "spill", "namespace": NS},
        "spec": {"nodeName": cluster.node, "restartPolicy": "Never",
                 "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "main", "image": "busybox", "command": [
                     "/bin/sh", "-c", "head -c 3145728 /dev/zero > x/blob; sleep 60"],
                     "volumeMounts": [{"name": "x", "mountPath": "/x"}]}],
                 "volumes": [{"name": "x", "emptyDir": {"sizeLimit": "1Mi"}}]}})
    pod = cluster.wait_phase("spill", "Failed", timeout=30)
    assert pod["status"]["reason"] == "Evicted"
    assert pod["status"]["message"] == 'Usage of EmptyDir volume "x" exceeds the limit "1Mi". '


def test_a_tenants_host_path_is_refused_and_no_mount_is_left(cluster: LimitsCluster) -> None:
    cluster.create_raw({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "sneaky", "namespace": NS,
                     "labels": {"tenancy.gpushare.io/tenant": "team-a"}},
        "spec": {"nodeName": cluster.node, "restartPolicy": "Never",
                 "containers": [{"name": "main", "image": "busybox", "command": ["true"],
                                 "volumeMounts": [{"name": "etc", "mountPath": "/host"}]}],
                 "volumes": [{"name": "etc", "hostPath": {"path": "/etc"}}]}})
    wait_for(lambda: any(
        e["reason"] == "FailedMount" and e["involvedObject"]["name"] == "sneaky"
        and "hostPath volumes are not allowed in a tenant's pod" in e["message"]
        for e in cluster.kube.list(EVENTS.collection(NS))["items"]), 30)
    assert cluster.pod("sneaky")["status"]["phase"] == "Pending"
    pods = Path(cluster.root / "agent" / "pods" / NS)
    for name in ("vols", "waits", "spill", "sneaky"):
        if cluster.pod(name) is not None:
            cluster.kube.delete(PODS.item(name, NS))
    for name in ("vols", "waits", "spill", "sneaky"):
        wait_for(lambda n=name: cluster.pod(n) is None, 30)
    wait_for(lambda: not mounts_under(pods), 20)
    assert not (pods / "vols").exists()
