"""Local storage measurement and the eviction decisions (pure apart from a temporary
directory)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpushare.agent.pods import storage as st


def test_usage_counts_blocks_once_per_inode_and_skips_symlinks(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a").write_bytes(b"x" * 100_000)
    os.link(tmp_path / "d" / "a", tmp_path / "b")
    (tmp_path / "c").symlink_to("/usr")
    used = st.usage_bytes(tmp_path)
    assert 100_000 <= used < 200_000
    assert st.usage_bytes(tmp_path / "missing") == 0


def test_limits_and_messages_follow_the_kubelet() -> None:
    pod = {"spec": {"containers": [
        {"name": "a", "resources": {"limits": {"ephemeral-storage": "1Mi"}}},
        {"name": "b"}],
        "volumes": [{"name": "cache", "emptyDir": {"sizeLimit": "2Mi"}},
                    {"name": "plain", "emptyDir": {}}]}}
    limits = st.storage_limits(pod)
    assert limits.pod_bytes == 1024 * 1024 and limits.pod_text == "1Mi"
    assert limits.empty_dirs == (("cache", 2 * 1024 * 1024, "2Mi"),)
    assert st.check_pod(limits, st.PodUsage(1024, {"cache": 1024})) is None
    assert st.check_pod(limits, st.PodUsage(1024, {"cache": 3 << 20})) == (
        'Usage of EmptyDir volume "cache" exceeds the limit "2Mi". ')
    assert st.check_pod(limits, st.PodUsage(2 << 20, {})) == (
        "Pod ephemeral local storage usage exceeds the total limit of containers 1Mi. ")
    two = {"spec": {"containers": [
        {"resources": {"limits": {"ephemeral-storage": "1Mi"}}},
        {"resources": {"limits": {"ephemeral-storage": "1Mi"}}}]}}
    assert st.storage_limits(two).pod_text == "2Mi"
    with pytest.raises(st.StorageSpecError, match=r"spec.volumes\[0\].emptyDir.sizeLimit"):
        st.storage_limits({"spec": {"volumes": [{"name": "x", "emptyDir": {"sizeLimit": "?"}}]}})


def test_pressure_picks_the_biggest_user_and_toggles_the_taint() -> None:
    calm = st.DiskState(free=50, total=100, threshold=10)
    tight = st.DiskState(free=5, total=100, threshold=10)
    assert st.pressure_victims({"a": 10, "b": 30}, calm) == []
    assert st.pressure_victims({"a": 10, "b": 30}, tight) == ["b"]
    other = {"key": "x", "effect": "NoSchedule"}
    added = st.with_taint([other], True)
    assert added == [other, {"key": st.DISK_PRESSURE_TAINT, "effect": "NoSchedule"}]
    assert st.with_taint(added, True) is None
    assert st.with_taint(added, False) == [other]
    assert "available: 5" in st.pressure_message(tight)


def test_qos_class_follows_requests_and_limits() -> None:
    from gpushare.agent.pods.podstatus import qos_class

    def pod(*resources: dict) -> dict:
        return {"spec": {"containers": [{"name": f"c{i}", "resources": r}
                                        for i, r in enumerate(resources)]}}

    both = {"limits": {"cpu": "1", "memory": "1Gi"}}
    assert qos_class(pod(both, both)) == "Guaranteed"
    assert qos_class(pod(both, {"requests": {"cpu": "100m"}})) == "Burstable"
    assert qos_class(pod({"limits": {"cpu": "1", "memory": "1Gi"},
                          "requests": {"cpu": "500m"}})) == "Burstable"
    assert qos_class(pod({}, {})) == "BestEffort"
