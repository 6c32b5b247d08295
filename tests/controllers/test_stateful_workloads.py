"""The StatefulSet, CronJob and DaemonSet controllers' plans (pure: objects in, writes
out); tests/e2e/test_stateful_workloads.py runs them against the API with kubectl."""

from __future__ import annotations

from datetime import UTC, datetime

from gpushare.controllers.workloads.cronjobs import SCHEDULED_ANNOTATION, plan_cronjob
from gpushare.controllers.workloads.daemonsets import fits, plan_daemonset
from gpushare.controllers.workloads.statefulsets import plan_statefulset


def _ts(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def statefulset(replicas: int = 2, policy: str = "OrderedReady", image: str = "a") -> dict:
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "web", "namespace": "default", "uid": "u1", "generation": 1},
            "spec": {"replicas": replicas, "serviceName": "web", "podManagementPolicy": policy,
                     "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "c", "image": image}]}}}}


def ready(pod: dict) -> dict:
    return {**pod, "status": {"phase": "Running",
                              "conditions": [{"type": "Ready", "status": "True"}]}}


def test_statefulset_creates_in_order_and_waits_for_ready():
    sts = statefulset()
    first = plan_statefulset(sts, [])
    assert [p["metadata"]["name"] for p in first.create] == ["web-0"]
    pod0 = first.create[0]
    assert pod0["spec"]["hostname"] == "web-0" and pod0["spec"]["subdomain"] == "web"
    assert pod0["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"] == "web-0"
    assert pod0["metadata"]["labels"]["apps.kubernetes.io/pod-index"] == "0"
    assert pod0["metadata"]["ownerReferences"][0]["kind"] == "StatefulSet"
    # web-0 not Ready yet: nothing more
    assert plan_statefulset(sts, [pod0]).create == []
    second = plan_statefulset(sts, [ready(pod0)])
    assert [p["metadata"]["name"] for p in second.create] == ["web-1"]
    assert second.status is not None and second.status["replicas"] == 2


def test_statefulset_parallel_creates_all_at_once():
    plan = plan_statefulset(statefulset(3, "Parallel"), [])
    assert [p["metadata"]["name"] for p in plan.create] == ["web-0", "web-1", "web-2"]


def test_statefulset_scales_down_highest_first_one_at_a_time():
    sts = statefulset(3)
    pods = [ready(p) for p in plan_statefulset(statefulset(3, "Parallel"), []).create]
    sts["spec"]["replicas"] = 1
    plan = plan_statefulset(sts, pods)
    assert plan.delete == ["web-2"] and plan.create == []
    going = {**pods[2], "metadata": {**pods[2]["metadata"], "deletionTimestamp": "now"}}
    assert plan_statefulset(sts, [pods[0], pods[1], going]).delete == []
    assert plan_statefulset(sts, pods[:2]).delete == ["web-1"]


def test_statefulset_rolls_a_new_template_from_the_top():
    pods = [ready(p) for p in plan_statefulset(statefulset(2, "Parallel"), []).create]
    plan = plan_statefulset(statefulset(2, image="b"), pods)
    assert plan.delete == ["web-1"]
    assert plan.status is not None and plan.status["updatedReplicas"] == 0


def test_statefulset_replaces_a_failed_pod_under_its_name():
    pods = [ready(p) for p in plan_statefulset(statefulset(2, "Parallel"), []).create]
    pods[0] = {**pods[0], "status": {"phase": "Failed"}}
    assert plan_statefulset(statefulset(2), pods).delete == ["web-0"]
    assert [p["metadata"]["name"] for p in plan_statefulset(statefulset(2), pods[1:]).create
            ] == ["web-0"]


def cronjob(**spec: object) -> dict:
    return {"apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": "tick", "namespace": "default", "uid": "c1",
                         "creationTimestamp": "2026-01-01T00:00:30Z"},
            "spec": {"schedule": "* * * * *",
                     "jobTemplate": {"metadata": {"labels": {"team": "a"}}, "spec": {
                         "template": {"spec": {"restartPolicy": "Never",
                                               "containers": [{"name": "c"}]}}}},
                     **spec}}


def job(name: str, outcome: str | None = None, scheduled: str = "2026-01-01T00:01:00Z"
        ) -> dict:
    status = {"conditions": [{"type": outcome, "status": "True"}]} if outcome else {}
    return {"metadata": {"name": name, "annotations": {SCHEDULED_ANNOTATION: scheduled}},
            "status": status}


def test_cronjob_makes_the_job_of_the_latest_minute():
    plan = plan_cronjob(cronjob(), [], _ts("2026-01-01T00:01:10"))
    assert plan.create is not None
    assert plan.create["metadata"]["name"] == f"tick-{int(_ts('2026-01-01T00:01:00') // 60)}"
    assert plan.create["metadata"]["labels"] == {"team": "a"}
    assert plan.create["metadata"]["annotations"][SCHEDULED_ANNOTATION] == \
        "2026-01-01T00:01:00Z"
    assert plan.status is not None and plan.status["lastScheduleTime"] == "2026-01-01T00:01:00Z"
    assert 49 < (plan.requeue_after or 0) < 51
    # Before the first scheduled time, nothing.
    assert plan_cronjob(cronjob(), [], _ts("2026-01-01T00:00:50")).create is None


def test_cronjob_suspend_forbid_replace_and_deadline():
    now = _ts("2026-01-01T00:02:05")
    running = job("tick-old")
    assert plan_cronjob(cronjob(suspend=True), [], now).create is None
    forbid = plan_cronjob(cronjob(concurrencyPolicy="Forbid"), [running], now)
    assert forbid.create is None and forbid.events[0][1] == "JobAlreadyActive"
    replace = plan_cronjob(cronjob(concurrencyPolicy="Replace"), [running], now)
    assert replace.create is not None and replace.delete == ["tick-old"]
    allow = plan_cronjob(cronjob(), [running], now)
    assert allow.create is not None and allow.delete == []
    late = plan_cronjob(cronjob(startingDeadlineSeconds=3), [], now)
    assert late.create is None and late.events[0][1] == "MissSchedule"


def test_cronjob_keeps_its_history_limits():
    done = [job(f"ok-{i}", "Complete", f"2026-01-01T00:0{i}:00Z") for i in range(5)]
    failed = [job(f"bad-{i}", "Failed", f"2026-01-01T00:0{i}:00Z") for i in range(3)]
    plan = plan_cronjob(cronjob(successfulJobsHistoryLimit=2), done + failed,
                        _ts("2026-01-01T00:09:30"))
    assert sorted(plan.delete) == ["bad-0", "bad-1", "ok-0", "ok-1", "ok-2"]


def test_cronjob_bad_schedule_is_an_event_not_a_crash():
    plan = plan_cronjob(cronjob(schedule="every minute"), [], _ts("2026-01-01T00:02:00"))
    assert plan.create is None and plan.events[0][1] == "InvalidSchedule"
    assert "spec.schedule" in plan.events[0][2]


def node(name: str, labels: dict | None = None, taints: list | None = None,
         static: bool = False) -> dict:
    meta: dict = {"name": name, "labels": labels or {}}
    if static:
        meta["annotations"] = {"gpushare.io/static-node": "true"}
    return {"metadata": meta, "spec": {"taints": taints or []}}


def daemonset(**template_spec: object) -> dict:
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "agent", "namespace": "default", "uid": "d1", "generation": 1},
            "spec": {"selector": {"matchLabels": {"app": "agent"}},
                     "template": {"metadata": {"labels": {"app": "agent"}},
                                  "spec": {"containers": [{"name": "c"}], **template_spec}}}}


def test_daemonset_fits_agent_nodes_by_selector_and_tolerations():
    no_agent = {"key": "gpushare.io/no-agent", "value": "true", "effect": "NoSchedule"}
    gpu = node("gpu", {"pool": "gpu"})
    cpu = node("cpu", {"pool": "cpu"})
    tainted = node("t", {"pool": "gpu"}, [{"key": "team", "value": "a", "effect": "NoSchedule"}])
    static = node("s", {"pool": "gpu"}, [no_agent])
    untainted_static = node("u", {"pool": "gpu"}, static=True)
    plain = daemonset()
    assert [fits(plain, n) for n in (gpu, cpu, tainted, static, untainted_static)] == [
        True, True, False, False, False]
    picky = daemonset(nodeSelector={"pool": "gpu"},
                      tolerations=[{"key": "team", "operator": "Exists"},
                                   {"key": "gpushare.io/no-agent", "operator": "Exists"}])
    assert [fits(picky, n) for n in (gpu, cpu, tainted, static, untainted_static)] == [
        True, False, True, True, True]


def test_daemonset_one_pod_per_node_and_gone_from_unfit_nodes():
    ds = daemonset(nodeSelector={"pool": "gpu"})
    nodes = [node("a", {"pool": "gpu"}), node("b", {"pool": "gpu"}), node("c")]
    names = iter(["x1", "x2", "x3"])
    plan = plan_daemonset(ds, nodes, [], lambda: next(names))
    assert sorted(p["spec"]["nodeName"] for p in plan.create) == ["a", "b"]
    assert plan.create[0]["metadata"]["name"] == "agent-x1"
    assert plan.status is not None and plan.status["desiredNumberScheduled"] == 2
    pods = [ready(p) for p in plan.create]
    stray = {**pods[0], "metadata": {**pods[0]["metadata"], "name": "agent-x9"},
             "spec": {**pods[0]["spec"], "nodeName": "c"}}
    again = plan_daemonset(ds, nodes, [*pods, stray], lambda: "zz")
    assert again.create == [] and again.delete == ["agent-x9"]
    assert again.status is not None and again.status["numberMisscheduled"] == 1
