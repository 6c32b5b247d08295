"""ReplicaSet and Deployment rules."""

from __future__ import annotations

import itertools

from gpushare.controllers.workloads.replicas import (
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
    # 3 replicas: maxSurge 25% rounds up to 1, maxUnavailable 25% down to 0; the old
    # ReplicaSet (2 of 3) keeps its pods until new ones are available.
    assert plan.create is not None and plan.create["spec"]["replicas"] == 2
    assert plan.scale == {}
    assert plan.create["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1"
    status = plan_deployment(deployment(2), [current]).status
    assert status["availableReplicas"] == 2 and status["conditions"][0]["status"] == "True"


def _simulate(dep, steps=50):
    """Run the plan to completion, pods becoming available at once; every state seen."""
    sets: dict[str, dict] = {}
    seen = []
    for _ in range(steps):
        for r in sets.values():  # the ReplicaSet controller: pods exist and are ready
            n = r["spec"]["replicas"]
            r["status"] = {"replicas": n, "readyReplicas": n, "availableReplicas": n}
        plan = plan_deployment(dep, list(sets.values()))
        if plan.create is not None:
            sets[plan.create["metadata"]["name"]] = plan.create
        for name, replicas in plan.scale.items():
            sets[name]["spec"]["replicas"] = replicas
        for name, notes in plan.annotate.items():
            sets[name]["metadata"]["annotations"].update(notes)
        seen.append({n: r["spec"]["replicas"] for n, r in sets.items()})
        if plan.create is None and not plan.scale and not plan.annotate:
            break
    return sets, seen


def test_rolling_update_keeps_the_available_floor_and_the_surge_ceiling():
    from gpushare.controllers.workloads.replicas import rolling_bounds

    for replicas, surge, unavailable in ((4, "25%", "25%"), (10, 3, 0), (5, 0, 2), (1, 1, 0)):
        v1 = deployment(replicas)
        v1["spec"]["strategy"] = {"type": "RollingUpdate",
                                  "rollingUpdate": {"maxSurge": surge,
                                                    "maxUnavailable": unavailable}}
        sets, _ = _simulate(v1)
        v2 = {**v1, "spec": {**v1["spec"], "template": {
            **TEMPLATE, "metadata": {"labels": {"app": "web", "v": "2"}}}}}
        max_surge, max_unavailable = rolling_bounds(v2, replicas)
        sets2 = dict(sets)
        _, seen = _simulate_from(v2, sets2)
        for state in seen:
            assert sum(state.values()) <= replicas + max_surge, (replicas, state)
        # What old ReplicaSets keep plus the new one's available pods stay above the floor.
        for state in seen:
            assert sum(state.values()) >= replicas - max_unavailable, (replicas, state)
        new_name = f"web-{template_hash(v2['spec']['template'])}"
        assert seen[-1][new_name] == replicas
        assert all(v == 0 for n, v in seen[-1].items() if n != new_name)
        assert sets2[new_name]["metadata"]["annotations"][
            "deployment.kubernetes.io/revision"] == "2"


def _simulate_from(dep, sets, steps=60):
    seen = []
    for _ in range(steps):
        plan = plan_deployment(dep, list(sets.values()))
        if plan.create is not None:
            created = plan.create
            created["status"] = {"replicas": 0, "readyReplicas": 0, "availableReplicas": 0}
            sets[created["metadata"]["name"]] = created
        for name, replicas in plan.scale.items():
            sets[name]["spec"]["replicas"] = replicas
        for name, notes in plan.annotate.items():
            sets[name]["metadata"]["annotations"].update(notes)
        seen.append({n: r["spec"]["replicas"] for n, r in sets.items()})
        for r in sets.values():  # pods come up (and go) between steps
            n = r["spec"]["replicas"]
            r["status"] = {"replicas": n, "readyReplicas": n, "availableReplicas": n}
        if plan.create is None and not plan.scale and not plan.annotate:
            break
    return sets, seen


def test_rollout_never_progresses_past_unavailable_pods():
    v1 = deployment(2)
    sets, _ = _simulate(v1)
    v2 = {**v1, "spec": {**v1["spec"], "template": {
        **TEMPLATE, "metadata": {"labels": {"app": "web", "v": "2"}}}}}
    plan = plan_deployment(v2, list(sets.values()))
    new = plan.create
    assert new["spec"]["replicas"] == 1  # surge 25% of 2 rounds up to 1
    new["status"] = {"replicas": 1, "readyReplicas": 0, "availableReplicas": 0}
    sets[new["metadata"]["name"]] = new
    # The new pod never becomes available: the old pods stay (unavailable 25% of 2 is 0).
    again = plan_deployment(v2, list(sets.values()))
    assert again.create is None and again.scale == {}


def test_recreate_waits_for_old_pods_and_undo_takes_the_next_revision():
    v1 = deployment(2)
    v1["spec"]["strategy"] = {"type": "Recreate"}
    sets, _ = _simulate(v1)
    old_name = next(iter(sets))
    v2 = {**v1, "spec": {**v1["spec"], "template": {
        **TEMPLATE, "metadata": {"labels": {"app": "web", "v": "2"}}}}}
    plan = plan_deployment(v2, list(sets.values()))
    assert plan.scale == {old_name: 0} and plan.create["spec"]["replicas"] == 0
    sets, _ = _simulate_from(v2, sets)
    assert {n: r["spec"]["replicas"] for n, r in sets.items()} == {
        old_name: 0, f"web-{template_hash(v2['spec']['template'])}": 2}
    # Back to the first template (kubectl rollout undo): its ReplicaSet is reused and
    # gets revision 3; the Deployment says 3 too.
    plan = plan_deployment(v1, list(sets.values()))
    assert plan.annotate == {old_name: {"deployment.kubernetes.io/revision": "3"}}
    assert plan.deployment_annotations == {"deployment.kubernetes.io/revision": "3"}


def _stuck_rollout(replicas=10, surge=3, unavailable=2, deadline=None):
    """A rolled-out Deployment whose next template's pods never become available."""
    v1 = deployment(replicas)
    v1["spec"]["strategy"] = {"type": "RollingUpdate", "rollingUpdate": {
        "maxSurge": surge, "maxUnavailable": unavailable}}
    if deadline is not None:
        v1["spec"]["progressDeadlineSeconds"] = deadline
    sets, _ = _simulate(v1)
    v2 = {**v1, "spec": {**v1["spec"], "template": {
        **TEMPLATE, "metadata": {"labels": {"app": "web", "v": "2"}}}}}
    for _ in range(5):
        plan = plan_deployment(v2, list(sets.values()), now=1000.0)
        if plan.create is not None:
            plan.create["status"] = {"replicas": 0, "readyReplicas": 0, "availableReplicas": 0}
            sets[plan.create["metadata"]["name"]] = plan.create
        for name, size in plan.scale.items():
            sets[name]["spec"]["replicas"] = size
        for name, notes in plan.annotate.items():
            sets[name]["metadata"]["annotations"].update(notes)
        for r in sets.values():  # old pods stay available, new ones never are
            n = r["spec"]["replicas"]
            old = r["metadata"]["name"] != f"web-{template_hash(v2['spec']['template'])}"
            r["status"] = {"replicas": n, "readyReplicas": n if old else 0,
                           "availableReplicas": n if old else 0}
        if plan.status is not None:
            v2["status"] = plan.status
    new_name = f"web-{template_hash(v2['spec']['template'])}"
    old_name = next(n for n in sets if n != new_name)
    return v2, sets, old_name, new_name


def test_resizing_mid_rollout_shares_the_change_in_proportion():
    dep, sets, old, new = _stuck_rollout()
    # 10 replicas, maxSurge 3, maxUnavailable 2: the rollout stops at 8 old + 5 new.
    assert {n: r["spec"]["replicas"] for n, r in sets.items()} == {old: 8, new: 5}
    assert sets[new]["metadata"]["annotations"]["deployment.kubernetes.io/max-replicas"] == "13"
    # Scaled to 15 (18 allowed with the surge): 5 more pods, in proportion 8:5 against
    # the 13 they were sized for, as Kubernetes does: 3 to the old set, 2 to the new one.
    bigger = {**dep, "spec": {**dep["spec"], "replicas": 15}}
    plan = plan_deployment(bigger, list(sets.values()), now=1000.0)
    assert plan.scale == {old: 11, new: 7}
    assert plan.create is None
    for name in (old, new):
        assert plan.annotate[name] == {"deployment.kubernetes.io/desired-replicas": "15",
                                       "deployment.kubernetes.io/max-replicas": "18"}
    # Scaled down to 5 (8 allowed): 5 fewer, again in proportion, oldest first.
    smaller = {**dep, "spec": {**dep["spec"], "replicas": 5}}
    plan = plan_deployment(smaller, list(sets.values()), now=1000.0)
    assert sum(plan.scale.values()) == 8
    assert plan.scale == {old: 5, new: 3}


def test_a_resize_with_one_replicaset_is_no_proportional_step():
    digest = template_hash(TEMPLATE)
    current = rs(2, f"web-{digest}", {"replicas": 2, "readyReplicas": 2, "availableReplicas": 2})
    current["metadata"]["annotations"] = {"deployment.kubernetes.io/desired-replicas": "2"}
    assert plan_deployment(deployment(5), [current]).scale == {f"web-{digest}": 5}


def test_a_rollout_without_progress_exceeds_its_deadline():
    dep, sets, _old, new = _stuck_rollout(deadline=60)
    progressing = next(c for c in dep["status"]["conditions"] if c["type"] == "Progressing")
    assert progressing["status"] == "True"
    assert progressing["lastUpdateTime"] == "1970-01-01T00:16:40Z"  # the last progress
    # 30 s later nothing changed: the condition stays, and the controller looks again
    # when the deadline falls.
    plan = plan_deployment(dep, list(sets.values()), now=1030.0)
    assert plan.status is None and plan.scale == {}
    assert plan.recheck_after is not None and 30 <= plan.recheck_after <= 31
    plan = plan_deployment(dep, list(sets.values()), now=1061.0)
    progressing = next(c for c in plan.status["conditions"] if c["type"] == "Progressing")
    assert progressing["status"] == "False"
    assert progressing["reason"] == "ProgressDeadlineExceeded"
    assert progressing["message"] == f'ReplicaSet "{new}" has timed out progressing.'
    dep["status"] = plan.status
    # It stays exceeded until the rollout progresses again.
    later = plan_deployment(dep, list(sets.values()), now=2000.0)
    assert later.status is None
    sets[new]["status"] = {"replicas": 5, "readyReplicas": 1, "availableReplicas": 1}
    moving = plan_deployment(dep, list(sets.values()), now=2001.0)
    progressing = next(c for c in moving.status["conditions"] if c["type"] == "Progressing")
    assert progressing["status"] == "True" and progressing["reason"] == "ReplicaSetUpdated"


def test_replica_failure_condition_is_set_kept_and_cleared():
    from gpushare.controllers.workloads.replicas import with_replica_failure

    failed = with_replica_failure({"replicas": 2}, "exceeded quota: q", "2026-01-01T00:00:00Z")
    condition = failed["conditions"][0]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "ReplicaFailure", "True", "FailedCreate")
    again = with_replica_failure(failed, "exceeded quota: q", "2026-01-01T00:05:00Z")
    assert again["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert with_replica_failure(again, None, "2026-01-01T00:06:00Z") == {"replicas": 2}


def test_replication_controller_pods_name_their_owner():
    rc = rs(1, "legacy")
    plan = plan_replicaset(rc, [], suffixes(), ("v1", "ReplicationController"))
    owner = plan.create[0]["metadata"]["ownerReferences"][0]
    assert (owner["apiVersion"], owner["kind"], owner["name"]) == (
        "v1", "ReplicationController", "legacy")
