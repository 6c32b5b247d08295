"""ReplicaSet and Deployment rules."""

from __future__ import annotations

import itertools

from gpushare.controllers.replicas import (
    TEMPLATE_HASH_LABEL,
    plan_deployment,
    plan_replicaset,
    template_hash,
)

TEMPLATE = {"metadata": {"labels": {"app": "web"}},
            "spec": {"schedulerName": "gpushare", "containers": [{"name": "c", "image": "x"}]}}


def suffixes():
    counter = itertools.count()
    return lambda: f"s{next(counter)}"


def rs(replicas, name="web-abc", status=None):
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
            "spec": {"replicas": replicas, "template": TEMPLATE}, "status": status or {}}


def pod(name, *, node=None, ready=False, phase="Running", created="2026-01-01T00:00:00Z"):
    return {"metadata": {"name": name, "creationTimestamp": created},
            "spec": {"nodeName": node} if node else {},
            "status": {"phase": phase,
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_replicaset_creates_missing_pods_from_its_template_owned_by_it():
    plan = plan_replicaset(rs(3), [pod("a")], suffixes())
    assert len(plan.create) == 2
    created = plan.create[0]
    assert created["metadata"]["labels"] == {"app": "web"}
    assert created["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
    assert created["spec"]["schedulerName"] == "gpushare"
    assert plan.status["replicas"] == 3


def test_replicaset_scales_down_unplaced_then_youngest_pods_first():
    pods = [pod("old", node="n", ready=True, created="2026-01-01T00:00:00Z"),
            pod("young", node="n", ready=True, created="2026-01-02T00:00:00Z"),
            pod("pending")]
    assert plan_replicaset(rs(1), pods, suffixes()).delete == ["pending", "young"]


def test_replicaset_replaces_finished_pods_and_counts_ready():
    pods = [pod("done", phase="Failed"), pod("up", node="n", ready=True)]
    plan = plan_replicaset(rs(2), pods, suffixes())
    assert len(plan.create) == 1
    assert plan.status["readyReplicas"] == 1


def deployment(replicas, template=TEMPLATE):
    return {"metadata": {"name": "web", "namespace": "ns", "uid": "d1", "generation": 2},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "template": template}}


def test_deployment_creates_a_replicaset_named_by_its_template_hash():
    plan = plan_deployment(deployment(2), [])
    digest = template_hash(TEMPLATE)
    assert plan.create["metadata"]["name"] == f"web-{digest}"
    assert plan.create["spec"]["replicas"] == 2
    assert plan.create["spec"]["selector"]["matchLabels"][TEMPLATE_HASH_LABEL] == digest
    assert plan.create["spec"]["template"]["metadata"]["labels"][TEMPLATE_HASH_LABEL] == digest
    assert plan.create["metadata"]["ownerReferences"][0]["kind"] == "Deployment"


def test_new_template_moves_the_replicas_to_a_new_replicaset():
    digest = template_hash(TEMPLATE)
    current = rs(2, f"web-{digest}", {"replicas": 2, "readyReplicas": 2, "availableReplicas": 2})
    plan = plan_deployment(deployment(3), [current])
    assert plan.create is None and plan.scale == {f"web-{digest}": 3}
    changed = {**TEMPLATE, "metadata": {"labels": {"app": "web", "v": "2"}}}
    plan = plan_deployment(deployment(3, changed), [current])
    assert plan.create is not None
    assert plan.scale == {f"web-{digest}": 0}
    status = plan_deployment(deployment(2), [current]).status
    assert status["availableReplicas"] == 2 and status["conditions"][0]["status"] == "True"
