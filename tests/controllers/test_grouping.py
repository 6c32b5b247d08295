"""The pod-grouper's rules: owner chains to PodGroups."""

from __future__ import annotations

from gpushare.controllers.scheduling.grouping import owner_chain, plan_podgroup, spec_differs


def obj(kind, name, uid, *, owner=None, labels=None, annotations=None, api="v1", spec=None):
    meta = {"name": name, "namespace": "ns", "uid": uid}
    if owner is not None:
        meta["ownerReferences"] = [
            {"apiVersion": owner["apiVersion"], "kind": owner["kind"],
             "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
             "controller": True}
        ]
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": api, "kind": kind, "metadata": meta, "spec": spec or {}}


def lookup_in(*objects):
    by_uid = {o["metadata"]["uid"]: o for o in objects}

    def lookup(kind, namespace, name, uid):
        found = by_uid.get(uid)
        return found if found and found["kind"] == kind else None

    return lookup


def test_bare_pod_is_its_own_group_of_one_with_train_priority():
    pod = obj("Pod", "p", "u1")
    plan = plan_podgroup(owner_chain(pod, lookup_in()))
    assert plan.name == "pg-p-u1"
    assert plan.min_member == 1
    assert plan.queue == "default-queue"
    assert plan.priority_class_name == "train"
    assert plan.owner["kind"] == "Pod" and plan.owner["uid"] == "u1"


def test_job_min_member_queue_and_priority_come_from_the_job():
    job = obj("Job", "train", "j1", api="batch/v1",
              labels={"kai.scheduler/queue": "nlp", "priorityClassName": "build"},
              annotations={"kai.scheduler/batch-min-member": "4"})
    pod = obj("Pod", "train-abc", "p1", owner=job, labels={"kai.scheduler/queue": "other"})
    plan = plan_podgroup(owner_chain(pod, lookup_in(job)))
    assert plan.name == "pg-train-j1"
    assert plan.min_member == 4
    assert plan.queue == "nlp"  # the top owner wins over the pod
    assert plan.priority_class_name == "build"
    assert plan.owner == {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "j1",
                          "blockOwnerDeletion": False, "controller": False}


def test_pod_label_queue_used_when_owner_has_none_and_bad_min_member_warns():
    job = obj("Job", "j", "j1", api="batch/v1",
              annotations={"kai.scheduler/batch-min-member": "many"})
    pod = obj("Pod", "j-x", "p1", owner=job, labels={"kai.scheduler/queue": "vision"})
    plan = plan_podgroup(owner_chain(pod, lookup_in(job)))
    assert plan.queue == "vision"
    assert plan.min_member == 1
    assert "batch-min-member" in plan.warnings[0]


def test_deployment_pods_each_get_their_own_group_with_inference_priority():
    dep = obj("Deployment", "web", "d1", api="apps/v1", labels={"kai.scheduler/queue": "recsys"})
    rs = obj("ReplicaSet", "web-5f", "r1", api="apps/v1", owner=dep)
    pod = obj("Pod", "web-5f-xyz", "p9", owner=rs)
    plan = plan_podgroup(owner_chain(pod, lookup_in(dep, rs)))
    assert plan.name == "pg-web-5f-xyz-p9"
    assert plan.owner["kind"] == "Pod"
    assert plan.priority_class_name == "inference"
    assert plan.queue == "recsys"
    assert plan.top_owner_kind == "Deployment"


def test_cronjob_runs_are_grouped_by_job():
    cron = obj("CronJob", "nightly", "c1", api="batch/v1", labels={"kai.scheduler/queue": "nlp"})
    job = obj("Job", "nightly-123", "j7", api="batch/v1", owner=cron)
    pod = obj("Pod", "nightly-123-a", "p1", owner=job)
    plan = plan_podgroup(owner_chain(pod, lookup_in(cron, job)))
    assert plan.name == "pg-nightly-123-j7"
    assert plan.queue == "nlp"


def test_unreadable_owner_is_the_top_owner():
    custom = {"apiVersion": "example.com/v1", "kind": "Trainer",
              "metadata": {"name": "t", "uid": "t1"}}
    pod = obj("Pod", "t-0", "p1", owner=custom)
    plan = plan_podgroup(owner_chain(pod, lookup_in()))
    assert plan.name == "pg-t-t1"
    assert plan.owner["kind"] == "Trainer"


def test_priority_order_label_then_pod_label_then_spec():
    pod = obj("Pod", "p", "u", spec={"priorityClassName": "build"})
    assert plan_podgroup([pod]).priority_class_name == "build"
    pod["metadata"]["labels"] = {"priorityClassName": "inference"}
    assert plan_podgroup([pod]).priority_class_name == "inference"


def test_preemptibility_label_is_carried_and_invalid_one_ignored():
    pod = obj("Pod", "p", "u", labels={"kai.scheduler/preemptibility": "non-preemptible"})
    plan = plan_podgroup([pod])
    assert plan.spec()["preemptibility"] == "non-preemptible"
    pod["metadata"]["labels"]["kai.scheduler/preemptibility"] = "sometimes"
    plan = plan_podgroup([pod])
    assert "preemptibility" not in plan.spec()
    assert plan.warnings


def test_spec_differs_detects_changed_queue_only_on_owned_fields():
    pod = obj("Pod", "p", "u")
    plan = plan_podgroup([pod])
    stored = plan.body()
    assert not spec_differs(stored, plan)
    stored["spec"]["queue"] = "elsewhere"
    assert spec_differs(stored, plan)


def test_owner_cycle_terminates():
    a = obj("Job", "a", "a1", api="batch/v1")
    b = obj("Job", "b", "b1", api="batch/v1", owner=a)
    a["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "b",
                                         "uid": "b1", "controller": True}]
    pod = obj("Pod", "p", "p1", owner=a)
    chain = owner_chain(pod, lookup_in(a, b))
    assert len(chain) <= 9
