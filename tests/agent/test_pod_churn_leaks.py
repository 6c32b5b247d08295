"""Create and delete 200 pods (each a sleep in a network namespace of its own, with its
cgroups, its log and a memory emptyDir) through the API against a real `gpushare agent`
process, then look at the host for anything left behind: network namespaces, veths on the
bridge, nftables elements and rules naming the pods, pod cgroups, mounts, pod directories
and logs."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpushare.agent.runtime.network.addressing import VETH_PREFIX
from gpushare.kube.client import PODS
from podnet_support import NODE, Net, wait_for

CIDR = "10.244.231.0/24"
NS = "churn"
PODS_IN_ALL = 200
AT_ONCE = 25  # pods alive together (the /24 and a 2-core machine)


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    cluster = Net(tmp_path_factory.mktemp("pod-churn"), CIDR)
    cluster.kube.create("/api/v1/namespaces", {"metadata": {"name": NS}})
    yield cluster
    cluster.stop()


def _pod(name: str) -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": NS},
            "spec": {"nodeName": NODE, "restartPolicy": "Never",
                     "terminationGracePeriodSeconds": 0,
                     "volumes": [{"name": "scratch", "emptyDir": {"medium": "Memory",
                                                                  "sizeLimit": "1Mi"}}],
                     "containers": [{"name": "main", "image": "busybox",
                                     "command": ["sleep", "100000"],
                                     "resources": {"limits": {"memory": "64Mi"}},
                                     "volumeMounts": [{"name": "scratch",
                                                       "mountPath": "/scratch"}]}]}}


def _running(net: Net, names: list[str]) -> dict[str, str] | None:
    pods = net.kube.list(PODS.collection(NS))["items"]
    up = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods
          if (p.get("status") or {}).get("phase") == "Running"
          and (p.get("status") or {}).get("podIP")}
    return up if all(n in up for n in names) else None


def _out(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=False).stdout


def test_two_hundred_pods_come_and_go_leaving_nothing(net: Net) -> None:
    uids: list[str] = []
    for start in range(0, PODS_IN_ALL, AT_ONCE):
        names = [f"p{i}" for i in range(start, min(start + AT_ONCE, PODS_IN_ALL))]
        for name in names:
            net.kube.create(PODS.collection(NS), _pod(name))
        running = wait_for(lambda names=names: _running(net, names), 180,
                           f"pods {names[0]}..{names[-1]} Running")
        uids += [running[n] for n in names]
        for name in names:
            net.kube.delete(PODS.item(name, NS))
        wait_for(lambda: not net.kube.list(PODS.collection(NS))["items"], 120,
                 "the pods deleted")
    assert len(set(uids)) == PODS_IN_ALL
    bridge = net.bridge
    data = net.root / "agent"

    def clean() -> list[str]:
        left: list[str] = []
        spaces = _out("ip", "netns", "list")
        left += [f"netns of {u}" for u in uids if u in spaces]
        ports = _out("ip", "-o", "link", "show", "master", bridge)
        left += [f"veth {line.split(':')[1].strip()}" for line in ports.splitlines()
                 if VETH_PREFIX in line]
        rules = _out("nft", "list", "table", "inet", bridge) + _out(
            "nft", "list", "table", "bridge", bridge)
        left += [f"nft names {line.strip()}" for line in rules.splitlines()
                 if VETH_PREFIX in line or ((CIDR.rsplit(".", 1)[0] + ".") in line
                 and "elements" in line)]
        cgroups = _out("find", "/sys/fs/cgroup", "-maxdepth", "8", "-type", "d",
                       "-name", "pod-*")
        left += [f"cgroup {line}" for line in cgroups.splitlines()
                 if any(u in line for u in uids)]
        mounts = Path("/proc/self/mountinfo").read_text()
        left += [f"mount {line.split()[4]}" for line in mounts.splitlines()
                 if str(data / "pods") in line]
        pod_dirs = data / "pods" / NS
        left += [f"directory {d}" for d in (pod_dirs.iterdir() if pod_dirs.is_dir() else [])]
        return left

    # the agent reaps a deleted pod in a thread of its own: give the last ones time
    try:
        wait_for(lambda: not clean(), 120, "nothing of the deleted pods left")
    except AssertionError:
        raise AssertionError(f"left behind: {clean()[:20]}") from None
    # and the bridge itself, the tables and the agent are still there, serving
    assert _out("ip", "-o", "link", "show", bridge)
    assert "chain forward" in _out("nft", "list", "table", "inet", bridge)
