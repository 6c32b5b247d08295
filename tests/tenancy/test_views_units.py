"""The tenant's PriorityClass views, from a real cluster's classes."""

from __future__ import annotations

from gpushare.tenancy import names, views


def _class(name: str, value: int) -> dict:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name, "resourceVersion": "7"}, "value": value,
            "preemptionPolicy": "PreemptLowerPriority"}


# What kube-apiserver serves on every cluster (it makes the two system classes itself),
# beside the classes the deploy manifests add.
HOST = [_class("system-cluster-critical", 2_000_000_000),
        _class("system-node-critical", 2_000_001_000),
        _class("train", 50), _class("inference", 125)]


def test_system_classes_are_never_offered_to_a_tenant():
    """A tenant's API server refuses a class above 1000000000 (reserved for the system), so
    mirroring kube-apiserver's own classes failed the whole view sync on a real host."""
    want = views.tenant_priority_classes(HOST, None)
    assert sorted(want) == ["inference", "train"]
    assert want["train"]["value"] == 50
    assert want["train"]["metadata"]["labels"] == {names.VIEW_LABEL: "true"}


def test_a_system_class_named_by_the_virtual_cluster_is_not_offered_either():
    want = views.tenant_priority_classes(HOST, ("train", "system-node-critical"))
    assert sorted(want) == ["train"]


def test_which_classes_are_the_systems():
    assert views.is_system_priority_class(_class("system-anything", 10))
    assert views.is_system_priority_class(_class("urgent", 1_000_000_001))
    assert not views.is_system_priority_class(_class("urgent", 1_000_000_000))
