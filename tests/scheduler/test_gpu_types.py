"""Quota, limit and fair share per GPU type (``Queue.gpu_types``): the division, the
per-node limit, the type preference, and a property over whole cycles on random clusters
of two GPU types."""

from __future__ import annotations

import os
from fractions import Fraction

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpushare.model import GpuRequest, Job, Node, Pod, Queue, ResourceSpec
from gpushare.model.pod import ACTIVE_ALLOCATED
from gpushare.model.quantities import GPU, MILLI, RESOURCES
from gpushare.scheduler import ClusterState, Config, run_cycle
from gpushare.scheduler.fragmentation import GPU_PRODUCT_LABEL
from gpushare.scheduler.session import Session
from gpushare.simulator import settle

UNL = Fraction(-1)
OPEN = ResourceSpec(UNL, UNL, Fraction(1))
LABEL = {"H100": "NVIDIA-H100-80GB-HBM3", "L40S": "NVIDIA-L40S"}
SETTINGS = settings(max_examples=int(os.environ.get("GPUSHARE_PROPERTY_EXAMPLES", "60")),
                    deadline=None)


def typed_queue(name: str, types: dict[str, tuple[float, float]], parent: str | None = None,
                gpu: ResourceSpec | None = None) -> Queue:
    res = {r: OPEN for r in RESOURCES}
    res[GPU] = gpu or ResourceSpec(Fraction(0), UNL, Fraction(1))
    return Queue(name, parent=parent, resources=res, gpu_types={
        kind: ResourceSpec(Fraction(q), Fraction(lim), Fraction(1))
        for kind, (q, lim) in types.items()})


def cluster(nodes: dict[str, int], queues: list[Queue]) -> ClusterState:
    state = ClusterState()
    for kind, count in nodes.items():
        for i in range(count):
            state.upsert_node(Node(f"{kind.lower()}-{i}", gpus=2, cpu_millis=64000,
                                   memory_bytes=1 << 36, max_pods=64,
                                   labels={GPU_PRODUCT_LABEL: LABEL[kind]}))
    for queue in queues:
        state.upsert_queue(queue)
    return state


def add_job(state: ClusterState, name: str, queue: str, pods: int, kinds: tuple[str, ...] = (),
            age: float = 0.0, preemptible: bool = True) -> None:
    job = Job(name, "default", queue, priority=50 if preemptible else 125,
              preemptible=preemptible, min_member=1, created_at=-age)
    state.upsert_job(job)
    affinity = ((GPU_PRODUCT_LABEL, tuple(LABEL[k] for k in kinds)),) if kinds else ()
    for k in range(pods):
        state.upsert_pod(Pod(f"{name}-{k}", "default", job.key, k, gpu=GpuRequest(whole=1),
                             cpu_millis=100, memory_bytes=1 << 20, node_affinity=affinity))


def held_on(state: ClusterState, queue: str, kind: str) -> Fraction:
    """GPUs ``queue``'s subtree holds on nodes of ``kind``, counted from the pods."""
    subtree = {queue}
    grew = True
    while grew:
        more = {n for n, q in state.queues.items() if q.parent in subtree}
        grew = not more <= subtree
        subtree |= more
    total = Fraction(0)
    for pod in state.pods.values():
        if pod.status not in ACTIVE_ALLOCATED or pod.node is None:
            continue
        if state.nodes[pod.node].labels.get(GPU_PRODUCT_LABEL) != LABEL[kind]:
            continue
        if state.jobs[pod.job].queue in subtree:
            total += Fraction(pod.held().gpu, MILLI)
    return total


def test_division_per_type_by_type_quota():
    state = cluster({"H100": 2, "L40S": 2}, [
        typed_queue("a", {"H100": (3, -1), "L40S": (1, -1)}),
        typed_queue("b", {"H100": (1, -1), "L40S": (3, -1)})])
    add_job(state, "a-job", "a", 8)
    add_job(state, "b-job", "b", 8)
    types = Session(state, Config(), 0.0).proportion.gpu_types
    assert types is not None
    assert types.fair == {"H100": {"a": 3, "b": 1}, "L40S": {"a": 1, "b": 3}}


def test_no_type_entry_anywhere_builds_nothing():
    state = cluster({"H100": 1}, [typed_queue("a", {})])
    assert Session(state, Config(), 0.0).proportion.gpu_types is None


def test_type_limit_reason_names_the_type():
    state = cluster({"H100": 2, "L40S": 1}, [typed_queue("a", {"H100": (1, 1)})])
    add_job(state, "a-job", "a", 2, ("H100",))
    result = run_cycle(state, Config(), 0.0)
    assert held_on(state, "a", "H100") == 1
    reason = result.pending_reasons["default/a-job"]
    assert reason.startswith("GpuTypeLimit: queue a:") and "(H100 0)" in reason, reason


def test_compat_kai_core_ignores_type_entries():
    # The loaders refuse them under compat: kai; the core, given some anyway, stays KAI's.
    state = cluster({"H100": 2}, [typed_queue("a", {"H100": (1, 1)})])
    add_job(state, "a-job", "a", 4, ("H100",))
    run_cycle(state, Config(compat="kai"), 0.0)
    assert held_on(state, "a", "H100") == 4


# --------------------------------------------------------------------------- property
#
# Two types (H100 and L40S nodes, two GPUs each). Tree: dept (children a, b) and c at the
# top; every queue may have an entry per type (quota, limit or unlimited). Jobs ask for one
# type, both, or none; some arrive after two cycles (owners coming back, reclaim).

entry = st.one_of(st.none(), st.tuples(st.integers(0, 3), st.one_of(st.just(-1),
                                                                      st.integers(0, 4))))
specs = st.fixed_dictionaries({
    "h100": st.integers(1, 3),
    "l40s": st.integers(0, 3),
    "entries": st.lists(st.tuples(entry, entry), min_size=4, max_size=4),
    "early": st.lists(st.tuples(st.sampled_from("abc"), st.integers(1, 5),
                                st.sampled_from(["H100", "L40S", "both", "any"]),
                                st.booleans()), max_size=4),
    "late": st.lists(st.tuples(st.sampled_from("abc"), st.integers(1, 4),
                               st.sampled_from(["H100", "L40S", "both", "any"]),
                               st.booleans()), max_size=3),
})
KINDS = {"H100": ("H100",), "L40S": ("L40S",), "both": ("H100", "L40S"), "any": ()}


def _dept_quota(quota: dict[str, int]) -> int:
    """dept's quota on a type; with no entry, its children's (``GpuTypes.figures``)."""
    return quota.get("dept", quota.get("a", 0) + quota.get("b", 0))


def build(spec, capacity: dict[str, int]) -> list[Queue]:
    """The tree, with quotas per type never adding up to more than the parent's quota (the
    type's capacity at the top): over-committed quotas promise more than there is."""
    parents = {"dept": None, "a": "dept", "b": "dept", "c": None}
    entries = dict(zip(parents, spec["entries"], strict=True))
    types: dict[str, dict[str, tuple[int, int]]] = {name: {} for name in parents}
    for k, kind in enumerate(("H100", "L40S")):
        given_entries = {name: e[k] for name, e in entries.items() if e[k] is not None}
        quota = {name: e[0] for name, e in given_entries.items()}

        while (quota.get("a", 0) + quota.get("b", 0) > _dept_quota(quota)
               or _dept_quota(quota) + quota.get("c", 0) > capacity[kind]):
            for n in quota:
                quota[n] = max(0, quota[n] - 1)
        for name, (_, limit) in given_entries.items():
            types[name][kind] = (quota[name], -1 if limit == -1 else max(limit, quota[name]))
    return [typed_queue(name, types[name], parent) for name, parent in parents.items()]


def check(state: ClusterState, config: Config, capacity: dict[str, int]) -> None:
    # 1. No queue holds more of a type than its limit on that type.
    for name, queue in state.queues.items():
        for kind, entry_spec in queue.gpu_types.items():
            if entry_spec.limit != UNL:
                assert held_on(state, name, kind) <= entry_spec.limit, (name, kind)
    # 2. Per type, the fair shares of siblings sum to at most what their parent got (the
    #    type's capacity at the top).
    types = Session(state, config, 0.0).proportion.gpu_types
    if types is None:
        return
    for kind, fair in types.fair.items():
        assert types.capacity[kind] == capacity[kind]
        for parent in (None, *state.queues):
            kids = [n for n, q in state.queues.items() if q.parent == parent]
            if not kids:
                continue
            total = sum((fair.get(n, Fraction(0)) for n in kids), Fraction(0))
            bound = capacity[kind] if parent is None else fair.get(parent, Fraction(0))
            assert total <= bound, (kind, parent, total, bound)


@SETTINGS
@given(specs)
# a may hold one H100 and asks for four of either type: one H100, the rest on L40S.
@example({"h100": 2, "l40s": 2,
          "entries": [(None, None), ((0, 1), None), (None, None), (None, None)],
          "early": [("a", 4, "any", True)], "late": [("c", 2, "H100", False)]})
# c owns the H100s (quota 4) and comes back after a borrowed them all: reclaim by type.
@example({"h100": 2, "l40s": 1,
          "entries": [(None, None), (None, (2, -1)), (None, None), ((4, -1), None)],
          "early": [("a", 4, "H100", True), ("a", 2, "L40S", True)],
          "late": [("c", 2, "any", True)]})
def test_no_queue_passes_a_type_limit_and_type_shares_fit(spec):
    capacity = {"H100": 2 * spec["h100"], "L40S": 2 * spec["l40s"]}
    state = cluster({"H100": spec["h100"], "L40S": spec["l40s"]}, build(spec, capacity))
    for i, (leaf, pods, kinds, preemptible) in enumerate(spec["early"]):
        add_job(state, f"early{i}", leaf, pods, KINDS[kinds], 100.0 - i, preemptible)
    config = Config(staleness_grace_seconds=0)
    for cycle in range(5):
        if cycle == 2:
            for i, (leaf, pods, kinds, preemptible) in enumerate(spec["late"]):
                add_job(state, f"late{i}", leaf, pods, KINDS[kinds], 10.0 - i, preemptible)
        run_cycle(state, config, float(cycle))
        check(state, config, capacity)
        settle(state, float(cycle))
        check(state, config, capacity)


def test_relabelled_node_moves_what_its_pods_hold_to_the_new_type():
    state = cluster({"H100": 1}, [typed_queue("a", {"H100": (1, 2)})])
    add_job(state, "a-job", "a", 2, ())
    run_cycle(state, Config(), 0.0)
    settle(state, 0.0)
    held = Session(state, Config(), 1.0).proportion.gpu_types
    assert held is not None and held.held("a", "H100") == (2, 0)
    node = state.nodes["h100-0"]
    state.upsert_node(Node(node.name, gpus=2, cpu_millis=64000, memory_bytes=1 << 36,
                           max_pods=64, labels={GPU_PRODUCT_LABEL: LABEL["L40S"]}))
    after = Session(state, Config(), 2.0).proportion.gpu_types
    assert after is not None and after.held("a", "H100") == (0, 0)
    assert after.held("a", "L40S") == (2, 0)
    state.remove_node("h100-0")
    assert state.queue_usage["a"].by_product == {LABEL["H100"]: [0, 0],
                                                 LABEL["L40S"]: [0, 0]}
