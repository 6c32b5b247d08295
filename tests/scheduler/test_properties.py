"""Properties of whole scheduling cycles on random small clusters (hypothesis)."""

from __future__ import annotations

import os
from fractions import Fraction

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpushare.model import (
    ACTIVE_ALLOCATED,
    ON_NODE,
    GpuRequest,
    Job,
    Node,
    Pod,
    PodStatus,
    Queue,
    ResourceSpec,
)
from gpushare.model.quantities import MILLI, RESOURCES
from gpushare.scheduler import ClusterState, Config, run_cycle
from gpushare.scheduler.gang import GangView
from gpushare.scheduler.placement_registry import placement_strategy_names
from gpushare.simulator import settle

UNL = Fraction(-1)
# More examples on demand: GPUSHARE_PROPERTY_EXAMPLES=1000 pytest tests/scheduler
SETTINGS = settings(max_examples=int(os.environ.get("GPUSHARE_PROPERTY_EXAMPLES", "40")),
                    deadline=None, suppress_health_check=[HealthCheck.too_slow])

gpu_requests = st.one_of(
    st.builds(lambda n: GpuRequest(whole=n), st.integers(0, 2)),
    st.builds(lambda p: GpuRequest(portion=p), st.sampled_from([250, 330, 500, 750])),
    st.builds(lambda m, d: GpuRequest(memory_mib=m, devices=d),
              st.sampled_from([10, 40, 60]), st.integers(1, 2)),
)

job_specs = st.fixed_dictionaries({
    "queue": st.integers(0, 2),
    "pods": st.integers(1, 3),
    "elastic": st.booleans(),
    "priority": st.sampled_from([50, 75, 100, 125]),
    "gpu": gpu_requests,
    "cpu": st.sampled_from([0, 500, 4000]),
    "age": st.integers(0, 100),
})

clusters = st.fixed_dictionaries({
    "nodes": st.lists(st.tuples(st.integers(0, 4), st.booleans()), min_size=1, max_size=3),
    "quotas": st.lists(st.sampled_from([0, 0.5, 1, 2]), min_size=3, max_size=3),
    "limits": st.lists(st.sampled_from([-1, 1, 2, 3]), min_size=3, max_size=3),
    "jobs": st.lists(job_specs, min_size=1, max_size=8),
    "compat": st.sampled_from([None, "kai"]),
    "placement": st.sampled_from(list(placement_strategy_names())),
})


def build(spec) -> tuple[ClusterState, Config]:
    state = ClusterState()
    for i, (gpus, ready) in enumerate(spec["nodes"]):
        state.upsert_node(Node(f"n{i}", gpus=gpus, gpu_memory_mib=100, cpu_millis=8000,
                               memory_bytes=1 << 34, max_pods=6, ready=ready or i == 0))
    open_spec = {r: ResourceSpec(UNL, UNL, Fraction(1)) for r in RESOURCES}
    state.upsert_queue(Queue("org", resources=dict(open_spec)))
    for q in range(3):
        res = dict(open_spec)
        res["gpu"] = ResourceSpec(Fraction(str(spec["quotas"][q])),
                                  Fraction(spec["limits"][q]), Fraction(1))
        state.upsert_queue(Queue(f"q{q}", parent="org", resources=res, created_at=float(q)))
    for j, js in enumerate(spec["jobs"]):
        job = Job(f"j{j}", "default", f"q{js['queue']}", priority=js["priority"],
                  preemptible=js["priority"] < 100,
                  min_member=1 if js["elastic"] else js["pods"], created_at=-float(js["age"]))
        state.upsert_job(job)
        for k in range(js["pods"]):
            state.upsert_pod(Pod(f"j{j}-{k}", "default", job.key, k, gpu=js["gpu"],
                                 cpu_millis=js["cpu"], memory_bytes=1 << 20))
    config = Config(compat=spec["compat"], gpu_placement=spec["placement"],
                    staleness_grace_seconds=0)
    return state, config


def check_invariants(state: ClusterState) -> None:
    for name, node in state.nodes.items():
        used = [0] * node.gpus
        future = [0] * node.gpus
        cpu_used = cpu_future = pods_used = pods_future = 0
        for pod in state.pods.values():
            if pod.node != name or pod.status not in ON_NODE:
                continue
            share = MILLI if pod.gpu.whole else pod.portion
            assert len(set(pod.gpu_indices)) == len(pod.gpu_indices)
            if pod.gpu.whole:
                assert len(pod.gpu_indices) == pod.gpu.whole
            if pod.gpu.is_shared:
                assert len(pod.gpu_indices) == pod.gpu.devices
            now = pod.status is not PodStatus.PIPELINED
            stays = pod.status is not PodStatus.RELEASING
            for i in pod.gpu_indices:
                used[i] += share if now else 0
                future[i] += share if stays else 0
            cpu_used += pod.cpu_millis if now else 0
            cpu_future += pod.cpu_millis if stays else 0
            pods_used += now
            pods_future += stays
        assert all(u <= MILLI for u in used), (name, used)
        assert all(f <= MILLI for f in future), (name, future)
        assert cpu_used <= node.cpu_millis and cpu_future <= node.cpu_millis
        assert pods_used <= node.max_pods and pods_future <= node.max_pods
    for name, queue in state.queues.items():
        qu = state.queue_usage[name]
        limit, quota = queue.gpu.limit, queue.gpu.quota
        if limit != UNL:
            assert Fraction(qu.allocated.gpu, MILLI) <= limit, (name, qu.allocated)
        if quota != UNL:
            assert Fraction(qu.allocated_np.gpu, MILLI) <= quota, (name, qu.allocated_np)
    for job in state.jobs.values():
        pods = state.job_pods(job)
        active = sum(1 for p in pods if p.status in ACTIVE_ALLOCATED)
        if active:
            assert GangView(job, pods).satisfied(), job.key


@SETTINGS
@given(clusters)
def test_cycles_keep_every_invariant(spec) -> None:
    state, config = build(spec)
    for cycle in range(4):
        if cycle:
            settle(state, 0.0)
        run_cycle(state, config, 0.0)
        check_invariants(state)


@SETTINGS
@given(clusters)
def test_same_input_gives_same_decisions(spec) -> None:
    results = []
    for _ in range(2):
        state, config = build(spec)
        out = []
        for cycle in range(3):
            if cycle:
                settle(state, 0.0)
            out.append(run_cycle(state, config, 0.0))
        results.append(out)
    assert results[0] == results[1]


@SETTINGS
@given(
    gpus=st.integers(1, 4),
    quota=st.integers(1, 4),
    want=st.integers(1, 4),
    fraction=st.booleans(),
    non_preemptible=st.booleans(),
    compat=st.sampled_from([None, "kai"]),
)
def test_queue_under_quota_gets_its_share_back(gpus, quota, want, fraction, non_preemptible,
                                               compat) -> None:
    """A team below its quota with pending work gets it back within a few cycles, however
    much a bursting sibling has taken."""
    quota = min(quota, gpus)
    want = min(want, quota)
    state = ClusterState()
    state.upsert_node(Node("n0", gpus=gpus, gpu_memory_mib=100))
    open_spec = {r: ResourceSpec(UNL, UNL, Fraction(1)) for r in RESOURCES}
    state.upsert_queue(Queue("org", resources=dict(open_spec)))
    burst = dict(open_spec)
    burst["gpu"] = ResourceSpec(Fraction(0), UNL, Fraction(1))
    state.upsert_queue(Queue("burst", parent="org", resources=burst))
    owner = dict(open_spec)
    owner["gpu"] = ResourceSpec(Fraction(quota), UNL, Fraction(1))
    state.upsert_queue(Queue("owner", parent="org", resources=owner))
    hog = Job("hog", "default", "burst", priority=50, preemptible=True, min_member=1)
    state.upsert_job(hog)
    per_pod = GpuRequest(portion=500) if fraction else GpuRequest(whole=1)
    count = gpus * (2 if fraction else 1)
    for k in range(count):
        index = k // 2 if fraction else k
        state.upsert_pod(Pod(f"hog-{k}", "default", hog.key, k, gpu=per_pod,
                             status=PodStatus.RUNNING, node="n0", gpu_indices=(index,),
                             portion=500 if fraction else MILLI))
    job = Job("back", "default", "owner", priority=100 if non_preemptible else 50,
              preemptible=not non_preemptible, min_member=want)
    state.upsert_job(job)
    for k in range(want):
        state.upsert_pod(Pod(f"back-{k}", "default", job.key, k, gpu=GpuRequest(whole=1)))
    config = Config(compat=compat)
    for cycle in range(4):
        if cycle:
            settle(state, 0.0)
        run_cycle(state, config, 0.0)
        check_invariants(state)
    assert all(p.status in (PodStatus.RUNNING, PodStatus.BINDING) for p in state.job_pods(job))


# A gpu-memory pod under compat kai: its fit reads its queue's usage (the per-node quota
# check), which the fragmentation index's node versions do not follow. After the first pod
# of the job was bound, the second no longer fit anywhere, yet the index still offered n1.
_QUEUE_READING_FIT = {
    "nodes": [(1, False), (1, True)], "quotas": [0, 0, 0], "limits": [-1, -1, 1],
    "jobs": [{"queue": 0, "pods": 1, "elastic": False, "priority": 50,
              "gpu": GpuRequest(whole=0), "cpu": 0, "age": 0},
             {"queue": 2, "pods": 2, "elastic": True, "priority": 50,
              "gpu": GpuRequest(memory_mib=60, devices=1), "cpu": 0, "age": 0}],
    "compat": "kai", "placement": "fgd"}

# A gpu-memory pod in the default mode under fgd: its portion is another on each node's
# GPU, so the index's order (by one portion) put the small-GPU node first where a full scan
# scores the big one higher.
_MEMORY_PORTION_PER_NODE = {
    "nodes": [(2, False), (1, True)], "quotas": [0, 0, 0], "limits": [-1, -1, -1],
    "jobs": [{"queue": 0, "pods": pods, "elastic": False, "priority": 50, "gpu": gpu,
              "cpu": 0, "age": 0}
             for pods, gpu in [(1, GpuRequest(whole=0)), (1, GpuRequest(whole=0)),
                               (2, GpuRequest(portion=250)),
                               (3, GpuRequest(memory_mib=60, devices=1))]],
    "compat": None, "placement": "fgd"}


@SETTINGS
@given(clusters)
@example(_QUEUE_READING_FIT)
@example(_MEMORY_PORTION_PER_NODE)
def test_node_index_picks_what_a_full_scan_picks(spec) -> None:
    from gpushare.scheduler.placement import best_fit, ordered_fits
    from gpushare.scheduler.session import Session

    state, config = build(spec)
    run_cycle(state, config, 0.0)
    session = Session(state, config, 0.0)
    for pod in state.pods.values():
        if pod.status is not PodStatus.PENDING:
            continue
        for pipeline_only in (False, True):
            fits = ordered_fits(session, pod, None, pipeline_only)
            fast = best_fit(session, pod, None, pipeline_only)
            assert (fast is None) == (not fits)
            if fast is not None:
                assert (fast.node, fast.gpu_indices, fast.now) == (
                    fits[0].node, fits[0].gpu_indices, fits[0].now
                )


@SETTINGS
@given(clusters)
def test_cached_fair_order_matches_the_exact_order(spec) -> None:
    from gpushare.scheduler.ordering import JobQueue, _ExactJobQueue
    from gpushare.scheduler.session import Session

    state, config = build(spec)
    run_cycle(state, Config(actions=("allocate",), compat=config.compat), 0.0)
    settle(state, 0.0)
    for job in state.jobs.values():
        for pod in state.job_pods(job):
            if pod.status is PodStatus.RUNNING and pod.index == 0 and len(job.pods) > 1:
                state.set_pod(pod, PodStatus.PENDING)  # some gangs broken, some jobs growing
    session = Session(state, config, 0.0)
    jobs = state.jobs_with_pending_pods()
    fast, exact = JobQueue(session, jobs), _ExactJobQueue(session, jobs)
    while True:
        a, b = fast.pop(), exact.pop()
        assert (a and a.key) == (b and b.key)
        if a is None:
            break


tree_specs = st.fixed_dictionaries({
    "departments": st.lists(st.integers(1, 4), min_size=1, max_size=3),  # leaves in each
    "jobs": st.lists(st.tuples(st.integers(0, 11), st.sampled_from([50, 75, 100]),
                               st.integers(1, 2), st.booleans()), min_size=1, max_size=14),
    "changes": st.lists(st.tuples(st.sampled_from(["place", "evict", "push", "none"]),
                                  st.integers(0, 1000)), min_size=1, max_size=30),
    "quotas": st.lists(st.sampled_from([0, 1, 2, 4]), min_size=12, max_size=12),
})


@SETTINGS
@given(tree_specs)
def test_kept_fair_order_matches_the_exact_order_while_the_state_changes(spec) -> None:
    """Pops interleaved with allocations, evictions and jobs put back: the order kept
    incrementally (heaps per parent queue, caught up from the state's log of changed
    queues) hands out exactly what the reference order does."""
    from gpushare.scheduler.ordering import JobQueue, _ExactJobQueue
    from gpushare.scheduler.session import Session

    state = ClusterState()
    state.upsert_node(Node("big", gpus=256, gpu_memory_mib=100, cpu_millis=1 << 20,
                           memory_bytes=1 << 40, max_pods=1000))
    open_spec = {r: ResourceSpec(UNL, UNL, Fraction(1)) for r in RESOURCES}
    leaves = []
    for d, count in enumerate(spec["departments"]):
        state.upsert_queue(Queue(f"d{d}", resources=dict(open_spec), created_at=float(d)))
        for k in range(count):
            name = f"d{d}l{k}"
            res = dict(open_spec)
            res["gpu"] = ResourceSpec(Fraction(spec["quotas"][len(leaves)]), UNL, Fraction(1))
            state.upsert_queue(Queue(name, parent=f"d{d}", resources=res,
                                     created_at=float(len(leaves))))
            leaves.append(name)
    gpu_index = [0]

    def place(pod: Pod) -> None:
        state.set_pod(pod, PodStatus.RUNNING, "big", (gpu_index[0] % 256,), 1000)
        gpu_index[0] += 1

    for j, (leaf, priority, pods, running) in enumerate(spec["jobs"]):
        job = Job(f"j{j}", "default", leaves[leaf % len(leaves)], priority=priority,
                  preemptible=priority < 100, min_member=1, created_at=float(j))
        state.upsert_job(job)
        for k in range(pods):
            pod = Pod(f"j{j}-{k}", "default", job.key, k, gpu=GpuRequest(whole=1),
                      cpu_millis=100, memory_bytes=1 << 20)
            state.upsert_pod(pod)
            if running and k == 0:
                place(pod)
    session = Session(state, Config(), 0.0)
    jobs = state.jobs_with_pending_pods()
    fast, exact = JobQueue(session, jobs), _ExactJobQueue(session, jobs)
    changes = list(spec["changes"])
    while True:
        a, b = fast.pop(), exact.pop()
        assert (a and a.key) == (b and b.key)
        if a is None:
            break
        what, pick = changes.pop(0) if changes else ("none", 0)
        if what == "place":  # the job popped gets a pod placed
            pending = [p for p in state.job_pods(a) if p.status is PodStatus.PENDING]
            if pending:
                place(pending[0])
        elif what == "evict":  # some running pod goes back to pending
            running = sorted(k for k, p in state.pods.items() if p.status is PodStatus.RUNNING)
            if running:
                state.set_pod(state.pods[running[pick % len(running)]], PodStatus.PENDING)
        elif what == "push":  # the job competes again
            fast.push(a)
            exact.push(a)


def test_fair_order_decides_shares_the_floats_cannot_tell_apart_exactly() -> None:
    """q0 (1 GPU of a 5/6 share, asking 0.5) and q2 (0.4 of 4/3, asking 2) both come to a
    dominant share of exactly 1.8 with the job, which floats round to either side; the
    share without the job (1.2 against 0.3) must decide, as in the exact order."""
    from gpushare.scheduler.ordering import JobQueue, _ExactJobQueue
    from gpushare.scheduler.session import Session

    def job(queue: int, gpu: GpuRequest) -> dict:
        return {"queue": queue, "pods": 1, "elastic": False, "priority": 50, "gpu": gpu,
                "cpu": 0, "age": 0}

    spec = {"nodes": [(3, False)], "quotas": [0.5, 0.5, 1], "limits": [-1, -1, -1],
            "compat": None, "placement": "binpack",
            "jobs": [job(0, GpuRequest()), job(0, GpuRequest()), job(0, GpuRequest()),
                     job(0, GpuRequest(whole=1)), job(0, GpuRequest(portion=500)),
                     job(1, GpuRequest(whole=1)), job(2, GpuRequest(whole=2)),
                     job(2, GpuRequest(memory_mib=40))]}
    state, config = build(spec)
    run_cycle(state, Config(actions=("allocate",)), 0.0)
    settle(state, 0.0)
    session = Session(state, config, 0.0)
    jobs = state.jobs_with_pending_pods()
    fast, exact = JobQueue(session, jobs), _ExactJobQueue(session, jobs)
    order = []
    while (a := fast.pop()) is not None:
        b = exact.pop()
        assert b is not None
        order.append((a.key, b.key))
    assert order == [("default/j6", "default/j6"), ("default/j4", "default/j4")]
