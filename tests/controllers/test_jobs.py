"""The Job controller's rules: pods to create, completion, backoff."""

from __future__ import annotations

import itertools

from gpushare.controllers.workloads.jobs import COMPLETION_INDEX, plan_job

NOW = "2026-01-01T00:00:00Z"


def job(**spec):
    base = {
        "template": {
            "metadata": {"labels": {"app": "x"}},
            "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["true"]}]},
        }
    }
    base.update(spec)
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "ns", "uid": "uid-1"},
            "spec": base, "status": {}}


def suffixes():
    counter = itertools.count()
    return lambda: f"s{next(counter)}"


def pod(name, phase="Running", index=None):
    meta = {"name": name, "namespace": "ns"}
    if index is not None:
        meta["annotations"] = {COMPLETION_INDEX: str(index)}
    return {"metadata": meta, "status": {"phase": phase}}


def test_creates_parallelism_pods_owned_by_the_job():
    plan = plan_job(job(parallelism=4, completions=4), [], NOW, suffixes())
    assert len(plan.create) == 4
    first = plan.create[0]
    assert first["metadata"]["ownerReferences"][0]["controller"] is True
    assert first["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    labels = first["metadata"]["labels"]
    assert labels["controller-uid"] == "uid-1" and labels["job-name"] == "j"
    assert labels["app"] == "x"
    assert first["spec"]["restartPolicy"] == "Never"
    assert plan.status["active"] == 4 and plan.status["startTime"] == NOW


def test_default_is_one_pod_and_known_pods_are_not_recreated():
    plan = plan_job(job(), [pod("j-a")], NOW, suffixes())
    assert plan.create == []
    assert plan.status["active"] == 1


def test_completes_when_completions_succeeded():
    j = job(parallelism=2, completions=2)
    plan = plan_job(j, [pod("a", "Succeeded"), pod("b", "Succeeded")], NOW, suffixes())
    assert plan.create == []
    conds = plan.status["conditions"]
    assert conds[0]["type"] == "Complete" and conds[0]["status"] == "True"
    assert plan.status["succeeded"] == 2 and plan.status["completionTime"] == NOW


def test_replaces_failed_pod_until_backoff_limit_then_fails_and_stops_active():
    j = job(parallelism=1, completions=1, backoffLimit=1)
    plan = plan_job(j, [pod("a", "Failed")], NOW, suffixes())
    assert len(plan.create) == 1 and plan.status["failed"] == 1
    plan = plan_job(j, [pod("a", "Failed"), pod("b", "Failed"), pod("c")], NOW, suffixes())
    assert plan.create == []
    assert plan.delete == ["c"]
    assert plan.status["conditions"][0]["reason"] == "BackoffLimitExceeded"


def test_indexed_job_creates_missing_indexes_with_env_and_labels():
    j = job(parallelism=3, completions=3, completionMode="Indexed")
    plan = plan_job(j, [pod("j-1-x", index=1)], NOW, suffixes())
    indexes = sorted(p["metadata"]["labels"][COMPLETION_INDEX] for p in plan.create)
    assert indexes == ["0", "2"]
    env = plan.create[0]["spec"]["containers"][0]["env"]
    assert {"name": "JOB_COMPLETION_INDEX", "value": "0"} in env


def test_indexed_job_completes_with_every_index_and_reports_ranges():
    j = job(parallelism=3, completions=3, completionMode="Indexed")
    pods = [pod(f"p{i}", "Succeeded", index=i) for i in range(3)]
    plan = plan_job(j, pods, NOW, suffixes())
    assert plan.status["completedIndexes"] == "0-2"
    assert plan.status["conditions"][0]["type"] == "Complete"


def test_no_status_write_when_nothing_changed():
    j = job()
    first = plan_job(j, [pod("a")], NOW, suffixes())
    j["status"] = first.status
    assert plan_job(j, [pod("a")], "later", suffixes()).status is None


def test_finished_job_creates_nothing_more():
    j = job(completions=1)
    j["status"] = {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1}
    plan = plan_job(j, [], NOW, suffixes())
    assert plan.create == []


def test_backoff_doubles_from_10s_and_is_capped_at_6_minutes():
    from gpushare.controllers.workloads.jobs import backoff_seconds

    assert [backoff_seconds(n) for n in range(0, 8)] == [0, 10, 20, 40, 80, 160, 320, 360]
    assert backoff_seconds(1000) == 360
