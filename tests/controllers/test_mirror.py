"""The scheduler loop's mirror of the core's state: deltas in any order, assumed binds."""

from __future__ import annotations

from gpushare.controllers.nodes.static_nodes import static_node
from gpushare.controllers.scheduling.mirror import Mirror
from gpushare.model import PodStatus
from gpushare.scheduler.config import Config
from gpushare.scheduler.cycle import run_cycle

NOW = "2026-01-01T00:00:00Z"


def queue(name, parent=None, quota=1, limit=1):
    spec = {"resources": {"gpu": {"quota": quota, "limit": limit, "overQuotaWeight": 1}}}
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
            "metadata": {"name": name, "creationTimestamp": NOW}, "spec": spec}


def podgroup(name, queue_name, min_member=1):
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "ns", "creationTimestamp": NOW},
            "spec": {"minMember": min_member, "queue": queue_name, "priorityClassName": "train"}}


def pod(name, group, *, fraction=None, gpus=None, node=None, annotations=None):
    ann = {"pod-group-name": group}
    if fraction:
        ann["gpu-fraction"] = fraction
    ann.update(annotations or {})
    container = {"name": "c", "image": "x"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    spec = {"schedulerName": "gpushare", "containers": [container]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "annotations": ann,
                         "creationTimestamp": NOW},
            "spec": spec, "status": {"phase": "Pending"}}


def seeded(order):
    mirror = Mirror()
    objects = {
        "node": [static_node("n1", "1xL40S", "64", "512Gi", {}, NOW, taint=False)],
        "queue": [queue("ml-org"), *(queue(t, "ml-org", 0.33, 1) for t in ("nlp", "vision"))],
        "podgroup": [podgroup("pg-a", "nlp"), podgroup("pg-b", "vision")],
        "pod": [pod("a", "pg-a", fraction="0.33"), pod("b", "pg-b", fraction="0.33")],
    }
    handlers = {"node": mirror.on_node, "queue": mirror.on_queue,
                "podgroup": mirror.on_podgroup, "pod": mirror.on_pod}
    for kind in order:
        for obj in objects[kind]:
            handlers[kind]("ADDED", obj)
    return mirror


def test_any_arrival_order_gives_the_same_schedulable_state():
    for order in (["node", "queue", "podgroup", "pod"], ["pod", "podgroup", "queue", "node"],
                  ["podgroup", "pod", "node", "queue"]):
        mirror = seeded(order)
        assert sorted(mirror.state.pods) == ["ns/a", "ns/b"], order
        result = run_cycle(mirror.state, Config(), 1.0)
        assert sorted(b.pod for b in result.binds) == ["ns/a", "ns/b"]
        assert {b.gpu_indices for b in result.binds} == {(0,)}


def test_assumed_bind_survives_a_stale_event_so_no_gpu_is_booked_twice():
    mirror = Mirror()
    mirror.on_node("ADDED", static_node("n1", "1xL40S", "64", "512Gi", {}, NOW, taint=False))
    mirror.on_queue("ADDED", queue("q", quota=1, limit=-1))
    mirror.on_podgroup("ADDED", podgroup("pg-a", "q"))
    mirror.on_podgroup("ADDED", podgroup("pg-b", "q"))
    mirror.on_pod("ADDED", pod("a", "pg-a", gpus=1))
    first = run_cycle(mirror.state, Config(), 1.0)
    assert [b.pod for b in first.binds] == ["ns/a"]
    bind = first.binds[0]
    mirror.assume(bind.pod, bind.node, bind.gpu_indices, 1000)
    # An older update of the pod (no nodeName yet) arrives after the decision.
    mirror.on_pod("MODIFIED", pod("a", "pg-a", gpus=1, annotations={"x": "y"}))
    assert mirror.state.pods["ns/a"].status is PodStatus.BINDING
    mirror.on_pod("ADDED", pod("b", "pg-b", gpus=1))
    second = run_cycle(mirror.state, Config(), 2.0)
    assert second.binds == []
    assert "ns/pg-b" in second.pending_reasons


def test_failed_bind_makes_the_pod_pending_again():
    mirror = Mirror()
    mirror.on_node("ADDED", static_node("n1", "1xL40S", "64", "512Gi", {}, NOW, taint=False))
    mirror.on_queue("ADDED", queue("q", quota=1, limit=-1))
    mirror.on_podgroup("ADDED", podgroup("pg-a", "q"))
    mirror.on_pod("ADDED", pod("a", "pg-a", gpus=1))
    result = run_cycle(mirror.state, Config(), 1.0)
    mirror.assume("ns/a", result.binds[0].node, result.binds[0].gpu_indices, 1000)
    mirror.bind_failed("ns/a")
    assert mirror.state.pods["ns/a"].status is PodStatus.PENDING
    assert [b.pod for b in run_cycle(mirror.state, Config(), 2.0).binds] == ["ns/a"]


def test_bound_pod_reads_its_gpus_from_the_bind_annotations():
    mirror = Mirror()
    mirror.on_node("ADDED", static_node("n1", "2xH100", "64", "512Gi", {}, NOW, taint=False))
    mirror.on_queue("ADDED", queue("q", quota=2, limit=-1))
    mirror.on_podgroup("ADDED", podgroup("pg-a", "q"))
    bound = pod("a", "pg-a", fraction="0.5", node="n1",
                annotations={"gpushare.io/gpu-indices": "1", "gpushare.io/gpu-portion": "0.5"})
    mirror.on_pod("ADDED", bound)
    usage = mirror.state.usage["n1"]
    assert usage.gpu_used == [0, 500]


def test_pod_of_another_scheduler_or_without_group_is_not_scheduled():
    mirror = seeded(["node", "queue", "podgroup"])
    other = pod("c", "pg-a", fraction="0.33")
    other["spec"]["schedulerName"] = "default-scheduler"
    mirror.on_pod("ADDED", other)
    ungrouped = pod("d", "pg-a")
    del ungrouped["metadata"]["annotations"]["pod-group-name"]
    mirror.on_pod("ADDED", ungrouped)
    assert mirror.state.pods == {}


def test_deleting_a_podgroup_and_queue_drops_them():
    mirror = seeded(["node", "queue", "podgroup", "pod"])
    for name in ("a", "b"):
        mirror.on_pod("DELETED", pod(name, "x"))
    mirror.on_podgroup("DELETED", podgroup("pg-a", "nlp"))
    mirror.on_queue("DELETED", queue("nlp", "ml-org"))
    assert "ns/pg-a" not in mirror.state.jobs
    assert "nlp" not in mirror.state.queues


def test_pod_joins_the_group_its_owner_owns_before_the_annotation_lands():
    mirror = Mirror()
    mirror.on_node("ADDED", static_node("n1", "1xL40S", "64", "512Gi", {}, NOW, taint=False))
    mirror.on_queue("ADDED", queue("q", quota=1, limit=-1))
    job_pod = pod("j-abc", "unused", gpus=1)
    del job_pod["metadata"]["annotations"]["pod-group-name"]
    job_pod["metadata"]["uid"] = "pod-uid"
    job_pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "job-uid",
         "controller": True}]
    mirror.on_pod("ADDED", job_pod)  # before its PodGroup exists
    assert mirror.state.pods == {}
    group = podgroup("pg-j-job-uid", "q")
    group["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "job-uid"}]
    mirror.on_podgroup("ADDED", group)
    assert mirror.state.pods["ns/j-abc"].job == "ns/pg-j-job-uid"
    assert [b.pod for b in run_cycle(mirror.state, Config(), 1.0).binds] == ["ns/j-abc"]


def test_evicted_pod_stays_releasing_until_its_deletion_shows():
    mirror = Mirror()
    mirror.on_node("ADDED", static_node("n1", "1xL40S", "64", "512Gi", {}, NOW, taint=False))
    mirror.on_queue("ADDED", queue("q", quota=1, limit=-1))
    mirror.on_podgroup("ADDED", podgroup("pg-a", "q"))
    running = pod("a", "pg-a", gpus=1, node="n1",
                  annotations={"gpushare.io/gpu-indices": "0", "gpushare.io/gpu-portion": "1"})
    mirror.on_pod("ADDED", running)
    mirror.evicting.add("ns/a")
    mirror.on_pod("MODIFIED", running)  # an update written before the delete
    assert mirror.state.pods["ns/a"].status is PodStatus.RELEASING
    mirror.evict_failed("ns/a")
    assert mirror.state.pods["ns/a"].status is PodStatus.RUNNING
    mirror.evicting.add("ns/a")
    mirror.on_pod("DELETED", running)
    assert "ns/a" not in mirror.state.pods and not mirror.evicting


def test_pods_of_other_schedulers_take_cpu_and_memory_off_their_node():
    mirror = Mirror()
    mirror.on_node("ADDED", static_node("n1", "1xL40S", "8", "32Gi", {}, NOW, taint=False))
    daemon = pod("logger", "none", node="n1")
    daemon["spec"]["schedulerName"] = "default-scheduler"
    daemon["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "2", "memory": "4Gi"}}
    mirror.on_pod("ADDED", daemon)
    node = mirror.state.nodes["n1"]
    assert (node.cpu_millis, node.memory_bytes) == (6000, 28 * 1024**3)
    daemon["status"] = {"phase": "Succeeded"}
    mirror.on_pod("MODIFIED", daemon)
    assert mirror.state.nodes["n1"].cpu_millis == 8000
    mirror.on_pod("MODIFIED", {**daemon, "status": {"phase": "Running"}})
    mirror.on_pod("DELETED", daemon)
    assert mirror.state.nodes["n1"].cpu_millis == 8000


def test_a_deleted_podgroups_pods_hold_their_gpus_until_they_are_gone():
    """A Job deleted with its pods: the PodGroup may go first while the pods still stop
    on their node. What they hold is not handed out before they are gone (else the pod
    bound there is refused by the agent as over-committing the GPU); found by the fault
    run (tests/chaos)."""
    mirror = Mirror()
    mirror.on_node("ADDED", static_node("n1", "1xH100", "64", "512Gi", {}, NOW, taint=False))
    mirror.on_queue("ADDED", queue("q", quota=1, limit=-1))
    mirror.on_podgroup("ADDED", podgroup("pg-old", "q"))
    stopping = pod("old", "pg-old", gpus=1, node="n1",
                   annotations={"gpushare.io/gpu-indices": "0", "gpushare.io/gpu-portion": "1"})
    stopping["metadata"]["deletionTimestamp"] = NOW
    mirror.on_pod("ADDED", stopping)
    mirror.on_podgroup("ADDED", podgroup("pg-new", "q"))
    mirror.on_pod("ADDED", pod("new", "pg-new", gpus=1))
    mirror.on_podgroup("DELETED", podgroup("pg-old", "q"))
    assert mirror.state.usage["n1"].gpu_used == [1000]
    first = run_cycle(mirror.state, Config(), 1.0)
    assert first.binds == [] and [p.pod for p in first.pipelines] == ["ns/new"]
    mirror.on_pod("DELETED", stopping)
    assert "ns/pg-old" not in mirror.state.jobs
    assert mirror.state.usage["n1"].gpu_used == [0]
    mirror.on_pod("MODIFIED", pod("new", "pg-new", gpus=1))  # decided again, as the loop does
    assert [b.pod for b in run_cycle(mirror.state, Config(), 2.0).binds] == ["ns/new"]


def test_a_deleted_podgroup_without_pods_on_nodes_goes_at_once():
    mirror = seeded(["node", "queue", "podgroup", "pod"])
    mirror.on_podgroup("DELETED", podgroup("pg-a", "nlp"))  # its pod "a" is pending
    assert "ns/pg-a" not in mirror.state.jobs and "ns/a" not in mirror.state.pods


def _stopping_whole_gpu_pod(name, group):
    stopping = pod(name, group, gpus=1, node="n1",
                   annotations={"gpushare.io/gpu-indices": "0", "gpushare.io/gpu-portion": "1"})
    stopping["metadata"]["deletionTimestamp"] = NOW
    return stopping


def test_a_scheduler_started_after_a_podgroup_went_still_counts_its_stopping_pods():
    """The scheduler (re)started after a Job and its PodGroup were deleted, while the
    Job's pods still stop on their node: it never saw the PodGroup, yet what those pods
    hold is not free until they are gone; a pod asking for part of that GPU waits
    (pipelined) instead of being bound where the agent would refuse it. Found by the
    fault run (tests/chaos): the agent refused such a pod as over-committing its GPU."""
    mirror = Mirror()
    mirror.on_node("ADDED", static_node("n1", "1xH100", "64", "512Gi", {}, NOW, taint=False))
    mirror.on_queue("ADDED", queue("q", quota=1, limit=-1))
    stopping = _stopping_whole_gpu_pod("old", "pg-old")  # pg-old: never seen
    mirror.on_pod("ADDED", stopping)
    mirror.on_podgroup("ADDED", podgroup("pg-new", "q"))
    mirror.on_pod("ADDED", pod("new", "pg-new", fraction="0.5"))
    assert mirror.state.usage["n1"].gpu_used == [1000]
    assert mirror.state.pods["ns/old"].status is PodStatus.RELEASING
    first = run_cycle(mirror.state, Config(), 1.0)
    assert first.binds == [] and [p.pod for p in first.pipelines] == ["ns/new"]
    mirror.on_pod("DELETED", stopping)
    assert mirror.state.usage["n1"].gpu_used == [0]
    assert [q for q in mirror.state.queues if q.startswith("(")] == []  # nothing left over
    assert [j for j in mirror.state.jobs if j.startswith("ns/(")] == []
    mirror.on_pod("MODIFIED", pod("new", "pg-new", fraction="0.5"))
    second = run_cycle(mirror.state, Config(), 2.0)
    assert [(b.pod, b.gpu_indices) for b in second.binds] == [("ns/new", (0,))]


def test_a_bound_pod_without_its_podgroup_is_never_evicted_and_joins_it_when_it_comes():
    mirror = Mirror()
    mirror.on_node("ADDED", static_node("n1", "1xH100", "64", "512Gi", {}, NOW, taint=False))
    mirror.on_queue("ADDED", queue("q", quota=0, limit=-1))
    mirror.on_queue("ADDED", queue("r", quota=1, limit=-1))
    running = pod("a", "pg-a", gpus=1, node="n1",
                  annotations={"gpushare.io/gpu-indices": "0", "gpushare.io/gpu-portion": "1"})
    mirror.on_pod("ADDED", running)  # bound, its PodGroup not (yet) known
    mirror.on_podgroup("ADDED", podgroup("pg-b", "r"))
    mirror.on_pod("ADDED", pod("b", "pg-b", gpus=1))  # within its quota: would reclaim
    result = run_cycle(mirror.state, Config(), 1.0)
    assert result.binds == [] and result.evictions == []
    assert mirror.state.pods["ns/a"].status is PodStatus.RUNNING
    mirror.on_podgroup("ADDED", podgroup("pg-a", "q"))  # over its quota of 0 now
    assert mirror.state.pods["ns/a"].job == "ns/pg-a"
    assert mirror.state.usage["n1"].gpu_used == [1000]
    assert [j for j in mirror.state.jobs if j.startswith("ns/(")] == []
    assert [e.pod for e in run_cycle(mirror.state, Config(), 2.0).evictions] == ["ns/a"]


def priority_class(name, value, policy=None):
    obj = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
           "metadata": {"name": name}, "value": value}
    if policy is not None:
        obj["preemptionPolicy"] = policy
    return obj


def test_a_priority_class_that_never_preempts_reaches_its_jobs_and_can_change_back():
    mirror = Mirror()
    mirror.on_queue("ADDED", queue("q"))
    mirror.on_podgroup("ADDED", podgroup("pg-a", "q"))
    assert mirror.state.jobs["ns/pg-a"].may_preempt
    mirror.on_priority_class("ADDED", priority_class("train", 50, "Never"))
    job = mirror.state.jobs["ns/pg-a"]
    assert (job.priority, job.may_preempt) == (50, False)
    mirror.on_priority_class("MODIFIED", priority_class("train", 50, "PreemptLowerPriority"))
    assert mirror.state.jobs["ns/pg-a"].may_preempt
    mirror.on_priority_class("MODIFIED", priority_class("train", 50, "Never"))
    mirror.on_priority_class("DELETED", priority_class("train", 50, "Never"))
    assert mirror.state.jobs["ns/pg-a"].may_preempt


def test_a_priority_class_with_an_unknown_policy_is_reported_by_field():
    mirror = Mirror()
    mirror.on_priority_class("ADDED", priority_class("train", 50, "Sometimes"))
    assert "preemptionPolicy" in mirror.invalid["priorityclass/train"]
    assert "train" not in mirror.priorities


def test_repeated_failed_binds_hold_the_pod_back_until_the_watch_shows_it_bound():
    mirror = Mirror()
    mirror.on_node("ADDED", static_node("n1", "1xL40S", "64", "512Gi", {}, NOW, taint=False))
    mirror.on_queue("ADDED", queue("q", quota=1, limit=-1))
    mirror.on_podgroup("ADDED", podgroup("pg-a", "q"))
    mirror.on_pod("ADDED", pod("a", "pg-a", gpus=1))
    for now in (1.0, 2.0):  # the first failure is retried at once, the second is not
        result = run_cycle(mirror.state, Config(), now)
        assert [b.pod for b in result.binds] == ["ns/a"]
        mirror.assume("ns/a", result.binds[0].node, result.binds[0].gpu_indices, 1000)
        mirror.bind_failed("ns/a")
    held = run_cycle(mirror.state, Config(), 3.0)
    assert held.binds == []
    assert held.pending_reasons["ns/pg-a"].startswith("BindBackOff:")
    assert [b.pod for b in run_cycle(mirror.state, Config(), 4.0).binds] == ["ns/a"]
    mirror.on_pod("MODIFIED", pod("a", "pg-a", gpus=1, node="n1"))  # bound at last
    assert "ns/a" not in mirror.state.bind_backoff.failures


def test_compat_kai_refuses_a_queue_with_a_lending_limit():
    lending = queue("q", quota=3, limit=-1)
    lending["spec"]["resources"]["gpu"]["lendingLimit"] = 1
    kai = Mirror(compat_kai=True)
    kai.on_queue("ADDED", lending)
    assert "q" not in kai.state.queues
    assert "spec.resources.gpu.lendingLimit is not available under compat: kai" in \
        kai.invalid["queue/q"]
    kai.on_podgroup("ADDED", podgroup("pg", "q"))
    assert "lendingLimit is not available under compat: kai" in kai.invalid["podgroup/ns/pg"]
    default = Mirror()
    default.on_queue("ADDED", lending)
    assert default.state.queues["q"].gpu.lending_limit == 1 and not default.invalid


def test_queue_lending_limit_reaches_the_core_from_the_api_objects():
    mirror = Mirror()
    mirror.on_node("ADDED", static_node("n1", "4xL40S", "64", "512Gi", {}, NOW, taint=False))
    owner = queue("owner", quota=3, limit=-1)
    owner["spec"]["resources"]["gpu"]["lendingLimit"] = 1
    mirror.on_queue("ADDED", owner)
    mirror.on_queue("ADDED", queue("other", quota=1, limit=-1))
    for name in ("a", "b", "c", "d"):
        mirror.on_podgroup("ADDED", podgroup(f"pg-{name}", "other"))
        mirror.on_pod("ADDED", pod(name, f"pg-{name}", gpus=1))
    result = run_cycle(mirror.state, Config(), 1.0)
    assert len(result.binds) == 2  # other's own GPU and the one owner lends
    assert [r for r in result.pending_reasons.values() if r.startswith("LendingLimit")]


def test_compat_kai_refuses_a_queue_with_gpu_types():
    typed = queue("q", quota=3, limit=-1)
    typed["spec"]["resources"]["gpu"]["types"] = {"H100": {"quota": 2}}
    kai = Mirror(compat_kai=True)
    kai.on_queue("ADDED", typed)
    assert "q" not in kai.state.queues
    assert "spec.resources.gpu.types is not available under compat: kai" in \
        kai.invalid["queue/q"]
    default = Mirror()
    default.on_queue("ADDED", typed)
    assert default.state.queues["q"].gpu_types["H100"].quota == 2 and not default.invalid
