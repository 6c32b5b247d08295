"""Properties of the eviction actions on random small clusters (hypothesis): who may be
evicted, by which action, and that consolidation only ever moves pods."""

from __future__ import annotations

import os
from fractions import Fraction

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpushare.model import GpuRequest, Job, Node, Pod, PodStatus, Queue, ResourceSpec
from gpushare.model.quantities import MILLI, RESOURCES
from gpushare.scheduler import ClusterState, Config, run_cycle
from gpushare.simulator import settle

UNL = Fraction(-1)
SETTINGS = settings(max_examples=int(os.environ.get("GPUSHARE_PROPERTY_EXAMPLES", "40")),
                    deadline=None, suppress_health_check=[HealthCheck.too_slow])

jobs = st.lists(
    st.fixed_dictionaries({
        "queue": st.integers(0, 2),
        "pods": st.integers(1, 3),
        "elastic": st.booleans(),
        "priority": st.sampled_from([50, 75, 100, 125]),
        "gpus": st.sampled_from([0, 1, 2, 500]),  # 500: half a GPU
        "running": st.booleans(),
        "age": st.integers(0, 100),
    }),
    min_size=1, max_size=9,
)
clusters = st.fixed_dictionaries({
    "nodes": st.lists(st.integers(1, 4), min_size=1, max_size=3),
    "quotas": st.lists(st.sampled_from([0, 1, 2]), min_size=3, max_size=3),
    "jobs": jobs,
    "compat": st.sampled_from([None, "kai"]),
})


def build(spec) -> tuple[ClusterState, Config]:
    """Running pods are placed first-fit on whole free GPUs; those that do not fit stay
    pending."""
    state = ClusterState()
    free: list[list[int]] = []
    for i, gpus in enumerate(spec["nodes"]):
        state.upsert_node(Node(f"n{i}", gpus=gpus, gpu_memory_mib=100, cpu_millis=64000,
                               memory_bytes=1 << 34))
        free.append([MILLI] * gpus)
    open_spec = {r: ResourceSpec(UNL, UNL, Fraction(1)) for r in RESOURCES}
    state.upsert_queue(Queue("org", resources=dict(open_spec)))
    for q in range(3):
        res = dict(open_spec)
        res["gpu"] = ResourceSpec(Fraction(spec["quotas"][q]), UNL, Fraction(1))
        state.upsert_queue(Queue(f"q{q}", parent="org", resources=res, created_at=float(q)))
    for j, js in enumerate(spec["jobs"]):
        job = Job(f"j{j}", "default", f"q{js['queue']}", priority=js["priority"],
                  preemptible=js["priority"] < 100,
                  min_member=1 if js["elastic"] else js["pods"], created_at=-float(js["age"]))
        state.upsert_job(job)
        gpus = js["gpus"]
        request = GpuRequest(portion=gpus) if gpus == 500 else GpuRequest(whole=gpus)
        need = gpus if gpus == 500 else gpus * MILLI
        for k in range(js["pods"]):
            pod = Pod(f"j{j}-{k}", "default", job.key, k, gpu=request, cpu_millis=100)
            if js["running"]:
                placed = _first_fit(free, need, whole=gpus != 500)
                if placed is not None:
                    node, indices = placed
                    pod.status, pod.node, pod.gpu_indices = PodStatus.RUNNING, f"n{node}", indices
                    pod.portion = gpus if gpus == 500 else (MILLI if gpus else 0)
            state.upsert_pod(pod)
    return state, Config(compat=spec["compat"], staleness_grace_seconds=3600)


def _first_fit(free: list[list[int]], need: int, whole: bool):
    for n, gpus in enumerate(free):
        if need == 0:
            return n, ()
        if whole:
            idle = [i for i, f in enumerate(gpus) if f == MILLI][: need // MILLI]
            if len(idle) == need // MILLI:
                for i in idle:
                    gpus[i] = 0
                return n, tuple(idle)
        else:
            for i, f in enumerate(gpus):
                if f >= need:
                    gpus[i] -= need
                    return n, (i,)
    return None


@SETTINGS
@given(clusters)
def test_evictions_follow_the_rules(spec) -> None:
    state, config = build(spec)
    for cycle in range(3):
        if cycle:
            settle(state, 0.0)
        before = {k: p.status for k, p in state.pods.items()}
        result = run_cycle(state, config, 0.0)
        placed = {p.pod for p in result.pipelines} | {b.pod for b in result.binds}
        for evict in result.evictions:
            pod = state.pods[evict.pod]
            job = state.jobs[pod.job]
            assert before[evict.pod] is not PodStatus.PENDING
            # Consolidation only moves (the moved pod is evicted and pipelined elsewhere);
            # stale-gang eviction is the only one that may take a non-preemptible job.
            if evict.action == "consolidation":
                assert pod.status is PodStatus.PIPELINED and evict.pod in placed, evict
            if evict.action != "stalegangeviction":
                assert job.preemptible, evict
            if pod.status is PodStatus.PIPELINED:
                assert pod.node is not None
            if evict.action == "preempt":
                # Someone of the same queue with a strictly higher priority was placed.
                assert any(
                    state.jobs[state.pods[k].job].queue == job.queue
                    and state.jobs[state.pods[k].job].priority > job.priority
                    for k in placed
                ), evict
            if evict.action == "reclaim":
                assert any(
                    state.jobs[state.pods[k].job].queue != job.queue for k in placed
                ), evict


@SETTINGS
@given(clusters)
def test_eviction_actions_are_deterministic(spec) -> None:
    outs = []
    for _ in range(2):
        state, config = build(spec)
        outs.append(run_cycle(state, config, 0.0))
    assert outs[0] == outs[1]


@SETTINGS
@given(clusters)
def test_reclaim_keeps_victim_queues_at_min_of_quota_and_fair_share(spec) -> None:
    """Reclaim never evicts non-preemptible work, and takes from a queue only while it is
    above min(quota, fair share): after the cycle, the victim queue's GPUs plus its largest
    evicted unit (a job's evicted pods) exceed that floor, i.e. the queue was still above
    the floor before its last victim went. (A victim is indivisible: a 2-GPU pod of a queue
    of quota 1 goes whole.) Allocate and reclaim only, so no other action moves the
    queues."""
    state, config = build(spec)
    config = Config(actions=("allocate", "reclaim"), compat=config.compat,
                    staleness_grace_seconds=config.staleness_grace_seconds)
    for cycle in range(3):
        if cycle:
            settle(state, 0.0)
        result = run_cycle(state, config, 0.0)
        taken: dict[str, dict[str, Fraction]] = {}
        for evict in result.evictions:
            assert evict.action == "reclaim"
            pod = state.pods[evict.pod]
            job = state.jobs[pod.job]
            assert job.preemptible, evict
            if pod.status is PodStatus.PIPELINED:
                continue  # moved, not taken: the queue keeps it
            g = pod.gpu
            gpus = Fraction(g.whole) if g.whole else Fraction(g.portion, MILLI) * g.devices
            per_job = taken.setdefault(job.queue, {})
            per_job[job.key] = per_job.get(job.key, Fraction(0)) + gpus
        for name, per_job in taken.items():
            report = result.queues[name]
            floor = min(Fraction(str(report.deserved["gpu"])),
                        Fraction(str(report.fair_share["gpu"])))
            allocated = Fraction(str(report.allocated["gpu"]))
            assert allocated + max(per_job.values()) > floor, (name, per_job, report)
