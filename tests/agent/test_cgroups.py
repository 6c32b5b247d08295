"""Pod and container cgroups on this host's real cgroup file system (the agent runs as root
here; the machine mounts cgroup v1 memory, cpu, cpuacct and pids)."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from gpushare.agent.runtime import cgroups as cg
from gpushare.agent.runtime.podlimits import PodLimits, remove_recorded


def _pod(containers: list[dict], uid: str | None = None) -> dict:
    return {"metadata": {"name": "p", "namespace": "t", "uid": uid or uuid.uuid4().hex},
            "spec": {"containers": containers}}


def test_limits_from_the_spec_follow_the_kubelet_rules() -> None:
    c = {"name": "a", "resources": {"limits": {"memory": "64Mi", "cpu": "500m"}}}
    limits = cg.container_limits(c, "spec.containers[0]")
    assert limits.memory_bytes == 64 * 1024 * 1024
    assert limits.cpu_quota_us == 50_000  # 0.5 of a 100 ms period
    assert limits.cpu_shares == 512  # the request defaults to the limit
    req = cg.container_limits({"name": "b", "resources": {"requests": {"cpu": "250m"}}}, "x")
    assert (req.cpu_quota_us, req.cpu_shares, req.memory_bytes) == (None, 256, None)
    assert cg.container_limits({"name": "c"}, "x").cpu_shares == cg.MIN_SHARES
    pod, per = cg.pod_limits(_pod([c, {**c, "name": "d"}]), 77)
    assert (pod.memory_bytes, pod.cpu_quota_us, pod.pids) == (128 * 1024 * 1024, 100_000, 77)
    assert set(per) == {"a", "d"}
    pod, _ = cg.pod_limits(_pod([c, {"name": "e"}]), None)
    assert pod.memory_bytes is None and pod.cpu_quota_us is None  # one container is unbounded
    assert cg.weight_for(2) == 1 and cg.weight_for(262144) == 10000 and cg.weight_for(1024) == 39


def test_a_bad_quantity_names_its_field() -> None:
    bad = {"name": "a", "resources": {"limits": {"memory": "lots"}}}
    with pytest.raises(cg.LimitsError, match=r"spec.containers\[1\].resources.limits.memory"):
        cg.pod_limits(_pod([{"name": "ok"}, bad]), None)
    with pytest.raises(cg.LimitsError, match=r"limits\.cpu: must be more than 0"):
        cg.container_limits({"resources": {"limits": {"cpu": "0"}}}, "spec.containers[0]")


def test_detect_reads_mountinfo_for_v1_and_v2() -> None:
    v1 = ("30 25 0:26 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
          "31 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
          "32 25 0:28 /kube /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n")
    own = "4:memory:/a/b\n3:cpu,cpuacct:/c\n2:pids:/kube/d\n0::/\n"
    support = cg.detect(v1, own)
    assert support.version == cg.V1
    by = {h.controller: h for h in support.hierarchies}
    assert by["memory"].own == "/a/b" and by["cpuacct"].mount == "/sys/fs/cgroup/cpu,cpuacct"
    assert by["pids"].own == "/d"  # relative to the mount's root
    missing = cg.detect(v1.splitlines()[0] + "\n", own)
    assert not missing.usable and "cpu, pids" in missing.reason


def test_this_host_offers_cgroups() -> None:
    support = cg.detect()
    assert support.usable, support.reason


@pytest.fixture()
def node(tmp_path: Path):
    cgroups = cg.Cgroups(cg.detect(), cg.node_parent(tmp_path))
    cgroups.ensure_root()
    yield cgroups
    assert cg.remove(cgroups.root)


def _run_in(procs: tuple[str, ...], script: str) -> subprocess.CompletedProcess[str]:
    """A shell that joins the cgroups first, as the container wrapper does."""
    joins = "; ".join(f'printf "%s\\n" "$$" > {p}' for p in procs)
    return subprocess.run(["/bin/sh", "-c", f"{joins}; {script}"], capture_output=True,
                          text=True, timeout=60, check=False)


def test_memory_limit_ends_the_run_by_the_oom_killer(node: cg.Cgroups, tmp_path: Path) -> None:
    pod = _pod([{"name": "hog", "resources": {"limits": {"memory": "32Mi"}}}])
    limits = PodLimits(node, pod, 64, tmp_path)
    limits.prepare()
    procs = limits.enter("hog")
    assert not limits.oom_killed("hog")
    done = _run_in(procs, 'exec python3 -c "x = bytearray(256 * 1024 * 1024)"')
    assert done.returncode == -9  # SIGKILL by the kernel
    assert limits.oom_killed("hog")
    memory = Path(limits.container_cgroup("hog").paths["memory"])
    assert (memory / "memory.limit_in_bytes").read_text().strip() == str(32 * 1024 * 1024)
    assert limits.remove() and not limits.cgroup.exists()


def test_pids_limit_stops_a_fork_loop_and_nothing_is_left(node: cg.Cgroups, tmp_path: Path) -> None:
    pod = _pod([{"name": "forker"}])
    limits = PodLimits(node, pod, 20, tmp_path)
    limits.prepare()
    procs = limits.enter("forker")
    done = _run_in(procs, "i=0; while [ $i -lt 60 ]; do sleep 30 >/dev/null 2>&1 & "
                          "i=$((i+1)); done; "
                          "echo started")
    pids = Path(limits.cgroup.paths["pids"])
    assert "Cannot fork" in done.stderr or "fork" in done.stderr.lower()
    child = Path(limits.cgroup.child("forker").paths["pids"])
    hits = [int((d / "pids.events").read_text().split()[1]) for d in (pids, child)]
    assert sum(hits) > 0  # the kernel counted the refused forks
    assert len(limits.cgroup.child("forker").pids()) <= 20  # the sleeps that did start
    assert limits.remove()
    assert not limits.cgroup.exists()
    assert subprocess.run(["true"], check=False).returncode == 0  # the node still forks


def test_cpu_limit_and_request_are_written(node: cg.Cgroups, tmp_path: Path) -> None:
    pod = _pod([{"name": "c", "resources": {"requests": {"cpu": "100m"},
                                            "limits": {"cpu": "200m"}}}])
    limits = PodLimits(node, pod, None, tmp_path)
    limits.prepare()
    limits.enter("c")
    cpu = Path(limits.container_cgroup("c").paths["cpu"])
    assert (cpu / "cpu.cfs_quota_us").read_text().strip() == "20000"
    assert (cpu / "cpu.cfs_period_us").read_text().strip() == "100000"
    assert (cpu / "cpu.shares").read_text().strip() == "102"
    assert (Path(limits.cgroup.paths["pids"]) / "pids.max").read_text().strip() == "max"
    done = _run_in(limits.container_cgroup("c").procs_files(),
                   "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done")
    assert done.returncode == 0
    used = limits.container_cgroup("c").cpu_seconds()
    assert used is not None and used > 0
    assert limits.remove()


def test_a_restarted_agent_finds_the_recorded_cgroups(node: cg.Cgroups, tmp_path: Path) -> None:
    uid = uuid.uuid4().hex
    pod = _pod([{"name": "c", "resources": {"limits": {"memory": "16Mi"}}}], uid)
    first = PodLimits(node, pod, 10, tmp_path)
    first.prepare()
    procs = first.enter("c")
    # a process the test does not wait for (as after an agent restart): it is orphaned
    joins = "; ".join(f'printf "%s\\n" "$$" > {p}' for p in procs)
    subprocess.run(["/bin/sh", "-c", f"{joins}; sleep 60 >/dev/null 2>&1 &"], check=True)
    left = first.cgroup.child("c").pids()
    assert len(left) == 1
    elsewhere = cg.Cgroups(node.support, "/" + "other-parent-not-made")
    again = PodLimits(elsewhere, pod, 10, tmp_path)  # the recorded paths win
    assert again.cgroup == first.cgroup
    assert remove_recorded(tmp_path)  # kills the sleeper, removes the cgroups
    assert not first.cgroup.exists()
    assert not Path(f"/proc/{left[0]}").exists() or "sleep" not in Path(
        f"/proc/{left[0]}/cmdline").read_text()
