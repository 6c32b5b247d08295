"""Lending limits (``ResourceSpec.lending_limit``): the division, the capacity check and a
property over whole cycles on random queue trees."""

from __future__ import annotations

import os
from fractions import Fraction

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpushare.model import GpuRequest, Job, Node, Pod, PodStatus, Queue, ResourceSpec
from gpushare.model.quantities import GPU, MILLI, RESOURCES
from gpushare.scheduler import ClusterState, Config, run_cycle
from gpushare.scheduler.plugins.proportion.resource_division import ShareInput, divide
from gpushare.simulator import settle

UNL = Fraction(-1)
OPEN = ResourceSpec(UNL, UNL, Fraction(1))
SETTINGS = settings(max_examples=int(os.environ.get("GPUSHARE_PROPERTY_EXAMPLES", "60")),
                    deadline=None)


def gpu_queue(name: str, quota: float, lending: float | None = None,
              parent: str | None = None) -> Queue:
    res = {r: OPEN for r in RESOURCES}
    res[GPU] = ResourceSpec(Fraction(quota), UNL, Fraction(1),
                            None if lending is None else Fraction(lending))
    return Queue(name, parent=parent, resources=res)


def share(name: str, quota: int, request: int, kept: int | None = None,
          parent: str | None = None) -> ShareInput:
    zero = {r: Fraction(0) for r in RESOURCES}
    return ShareInput(
        name=name, parent=parent, priority=100, created_at=0.0,
        quota={**{r: UNL for r in RESOURCES}, GPU: Fraction(quota)},
        limit={r: UNL for r in RESOURCES}, weight={r: Fraction(1) for r in RESOURCES},
        request={**zero, GPU: Fraction(request)},
        kept=None if kept is None else {GPU: Fraction(kept)})


def gpu_shares(capacity: int, inputs: list[ShareInput]) -> dict[str, Fraction]:
    total = {GPU: Fraction(capacity), "cpu": Fraction(0), "memory": Fraction(0)}
    return {n: s[GPU] for n, s in divide(total, inputs).items()}


def test_division_keeps_the_unlent_part_out_of_the_over_quota_pass():
    # owner: quota 3, lends 1 (kept 2), asks for nothing; other: quota 1, asks for 4.
    assert gpu_shares(4, [share("owner", 3, 0), share("other", 1, 4)]) == {
        "owner": 0, "other": 4}
    assert gpu_shares(4, [share("owner", 3, 0, kept=2), share("other", 1, 4)]) == {
        "owner": 2, "other": 2}
    # Once the owner asks for more than it keeps, the division is the usual one.
    assert gpu_shares(4, [share("owner", 3, 3, kept=2), share("other", 1, 4)]) == {
        "owner": 3, "other": 1}


def test_division_parent_kept_part_bounds_its_subtree():
    shares = gpu_shares(4, [share("dept", 3, 0, kept=2), share("team", 3, 0, parent="dept"),
                            share("outsider", 1, 4)])
    assert shares == {"dept": 2, "team": 0, "outsider": 2}


def cluster(gpus: int, queues: list[Queue], jobs: dict[str, int]) -> ClusterState:
    state = ClusterState()
    state.upsert_node(Node("n0", gpus=gpus, gpu_memory_mib=100, cpu_millis=64000,
                           memory_bytes=1 << 36, max_pods=64))
    for queue in queues:
        state.upsert_queue(queue)
    for queue_name, pods in jobs.items():
        add_job(state, f"{queue_name}-job", queue_name, pods)
    return state


def add_job(state: ClusterState, name: str, queue: str, pods: int, gpus: int = 1,
            age: float = 0.0) -> None:
    job = Job(name, "default", queue, priority=50, preemptible=True, min_member=1,
              created_at=-age)
    state.upsert_job(job)
    for k in range(pods):
        state.upsert_pod(Pod(f"{name}-{k}", "default", job.key, k, gpu=GpuRequest(whole=gpus),
                             cpu_millis=100, memory_bytes=1 << 20))


def held(state: ClusterState, queue: str) -> Fraction:
    return Fraction(state.queue_usage[queue].allocated.gpu, MILLI)


def test_burst_refused_with_a_reason_naming_the_lending_limit():
    state = cluster(4, [gpu_queue("owner", 3, lending=1), gpu_queue("other", 1)],
                    {"other": 4})
    result = run_cycle(state, Config(), 0.0)
    assert held(state, "other") == 2
    reason = result.pending_reasons["default/other-job"]
    assert "LendingLimit" in reason or "lending limit" in reason, reason
    assert "keep idle" in reason and "2.00" in reason, reason


def test_unset_lending_limit_lends_everything():
    state = cluster(4, [gpu_queue("owner", 3), gpu_queue("other", 1)], {"other": 4})
    run_cycle(state, Config(), 0.0)
    assert held(state, "other") == 4


def test_compat_kai_core_ignores_lending_limits():
    # The loaders refuse a lending limit under compat: kai; the core, given one anyway,
    # stays KAI's.
    state = cluster(4, [gpu_queue("owner", 3, lending=0), gpu_queue("other", 1)],
                    {"other": 4})
    run_cycle(state, Config(compat="kai"), 0.0)
    assert held(state, "other") == 4


# --------------------------------------------------------------------------- property
#
# Tree: dept (children a, b) and c, d at the top; quotas never add up to more than their
# parent's (or the cluster). Every queue may have a lending limit. Some jobs are there
# from the start, the rest arrive after two cycles (owners coming back).

queue_specs = st.fixed_dictionaries({
    "gpus": st.integers(2, 8),
    "quota_parts": st.lists(st.integers(0, 3), min_size=4, max_size=4),
    "child_parts": st.lists(st.integers(0, 2), min_size=2, max_size=2),
    "lending": st.lists(st.one_of(st.none(), st.integers(0, 3)), min_size=5, max_size=5),
    "early": st.lists(st.tuples(st.sampled_from("abcd"), st.integers(1, 5)), max_size=4),
    "late": st.lists(st.tuples(st.sampled_from("abcd"), st.integers(1, 4)), max_size=3),
})


def build_tree(spec) -> list[Queue]:
    gpus = spec["gpus"]
    dept, c, d = spec["quota_parts"][0], spec["quota_parts"][1], spec["quota_parts"][2]
    while dept + c + d > gpus:  # never more quota than the cluster holds
        dept, c, d = max(0, dept - 1), max(0, c - 1), max(0, d - 1)
    a, b = spec["child_parts"]
    while a + b > dept:
        a, b = max(0, a - 1), max(0, b - 1)
    quotas = {"dept": dept, "a": a, "b": b, "c": c, "d": d}
    parents = {"dept": None, "a": "dept", "b": "dept", "c": None, "d": None}
    queues = []
    for (name, quota), lending in zip(quotas.items(), spec["lending"], strict=True):
        lent = None if lending is None else min(lending, quota)
        queues.append(gpu_queue(name, quota, lent, parents[name]))
    return queues


def reserve(state: ClusterState, name: str) -> Fraction:
    """What ``name``'s subtree keeps idle from everyone outside it: its own unused quota
    beyond its lending limit, or what its children keep, whichever is more."""
    queue = state.queues[name]
    from_children = sum((reserve(state, kid) for kid in queue.children), Fraction(0))
    spec = queue.gpu
    if spec.lending_limit is None:
        return from_children
    unused = max(Fraction(0), spec.quota - held(state, name))
    return max(from_children, unused - min(spec.lending_limit, unused))


def check_borrowing(state: ClusterState, gpus: int) -> None:
    """A queue above its quota holds no more than others may lend: everything held plus
    what the queues outside its branch keep idle fits in the cluster."""
    total = sum((held(state, n) for n, q in state.queues.items() if q.parent is None),
                Fraction(0))
    for name, queue in state.queues.items():
        if held(state, name) <= queue.gpu.quota:
            continue
        kept_from_it = Fraction(0)
        current: str | None = name
        while current is not None:
            parent = state.queues[current].parent
            siblings = [n for n, q in state.queues.items() if q.parent == parent]
            kept_from_it += sum((reserve(state, s) for s in siblings if s != current),
                                Fraction(0))
            current = parent
        assert total + kept_from_it <= gpus, (name, total, kept_from_it)


@SETTINGS
@given(queue_specs)
# c keeps all 3 of its quota: d (quota 1) bursts into nothing of it.
@example({"gpus": 4, "quota_parts": [0, 3, 1, 0], "child_parts": [0, 0],
          "lending": [None, None, None, 0, None], "early": [("d", 4)], "late": []})
# a borrows c's lent GPU; when c comes back, the free GPU is b's kept one: c must reclaim
# its own from a rather than take b's (a step within quota is checked too).
@example({"gpus": 2, "quota_parts": [1, 1, 0, 0], "child_parts": [0, 1],
          "lending": [None, None, 0, None, None], "early": [("a", 1)], "late": [("c", 1)]})
def test_no_queue_borrows_more_than_others_lend(spec):
    gpus = spec["gpus"]
    state = cluster(gpus, build_tree(spec), {})
    for i, (leaf, pods) in enumerate(spec["early"]):
        add_job(state, f"early{i}", leaf, pods, age=100.0 - i)
    config = Config(staleness_grace_seconds=0)
    for cycle in range(5):
        if cycle == 2:
            for i, (leaf, pods) in enumerate(spec["late"]):
                add_job(state, f"late{i}", leaf, pods, age=10.0 - i)
        run_cycle(state, config, float(cycle))
        settle(state, float(cycle))
        check_borrowing(state, gpus)
        assert all(p.status in (PodStatus.RUNNING, PodStatus.PENDING)
                   for p in state.pods.values())
