"""The fill protocol, its summary objects, and the fragmentation rules in the core."""

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from gpushare.model.pod import PodStatus
from gpushare.scheduler.config import Config
from gpushare.scheduler.cycle import open_session
from gpushare.scheduler.frag_placement import set_task_mix
from gpushare.scheduler.fragmentation import TaskMix
from gpushare.scheduler.placement import best_fit, ordered_fits
from gpushare.simulator.fill import build_cluster, capacity_of, run_fill, tune
from gpushare.simulator.traces import TraceNode, TracePod, read_nodes, read_pods

HERE = Path(__file__).parent / "traces"
NODES = read_nodes(HERE / "tiny_nodes.csv")
PODS = read_pods(HERE / "tiny_pods.csv")


def _synthetic(n_nodes: int, n_pods: int, seed: int) -> tuple[list[TraceNode], list[TracePod]]:
    rng = random.Random(seed)
    nodes = [TraceNode(f"n{i:03d}", rng.choice([32000, 64000, 96000]), 262144,
                       rng.choice([2, 4, 8]), rng.choice(["T4", "A10"])) for i in range(n_nodes)]
    pods = []
    for i in range(n_pods):
        kind = rng.random()
        if kind < 0.4:
            num, milli = 1, rng.choice([100, 250, 460, 500, 810])
        elif kind < 0.8:
            num, milli = 1, 1000
        elif kind < 0.9:
            num, milli = rng.choice([2, 4, 8]), 1000
        else:
            num, milli = 0, 0
        spec = (rng.choice(["T4", "A10"]),) if rng.random() < 0.2 else ()
        pods.append(TracePod(f"p{i:04d}", rng.choice([1000, 4000, 8000, 16000]), 4096, num,
                             milli, spec))
    return nodes, pods


def test_tune_reaches_the_demand_and_stops_below_it():
    capacity = capacity_of(NODES)
    for demand in (0.5, 1.3, 2.0):
        out = tune(PODS, capacity, demand, random.Random(1))
        total = sum(p.gpu_total for p in out)
        assert total <= demand * capacity
        assert total > demand * capacity - 8000  # the next pod would have crossed it
    assert len({p.name for p in tune(PODS, capacity, 2.0, random.Random(1))}) == len(
        tune(PODS, capacity, 2.0, random.Random(1)))


@pytest.mark.parametrize("policy", ["binpack", "spread", "fgd", "fragmentation", "random"])
def test_fill_is_reproducible_per_seed(policy):
    a = run_fill(NODES, PODS, policy, 7)
    b = run_fill(NODES, PODS, policy, 7)
    assert [(s.pod, s.node) for s in a.steps] == [(s.pod, s.node) for s in b.steps]
    c = run_fill(NODES, PODS, policy, 8)
    assert [s.pod for s in a.steps] != [s.pod for s in c.steps]
    last = a.steps[-1]
    assert last.arrived <= 1.3 * a.capacity and last.allocated <= a.capacity


def test_fill_places_through_the_core_respecting_gpu_types():
    r = run_fill(NODES, PODS, "fragmentation", 3)
    by_name = {p.name: p for p in PODS}
    models = {n.name: n.model for n in NODES}
    for step in r.steps:
        base = by_name.get(step.pod.split("-tuned-")[0])
        if step.node is not None and base.gpu_spec:
            assert models[step.node] in base.gpu_spec
    assert any(s.node is None for s in r.steps)  # 130 % cannot all fit


def test_summary_object_shape():
    r = run_fill(NODES, PODS, "fgd", 42)
    s = json.loads(json.dumps(r.summary()))
    assert s["kind"] == "summary" and s["policy"] == "fgd" and s["seed"] == 42
    assert s["gpus"] == 16
    alloc = s["allocation"]
    for mark in [*range(10, 131, 10), 100, 130]:
        assert str(mark) in alloc
    values = [alloc[str(m)] for m in range(1, 131)]
    assert values == sorted(values)  # no departures: allocation never falls
    assert all(0 <= v <= 100 for v in values)
    assert alloc["130"] == pytest.approx(100 * r.steps[-1].allocated / r.capacity, abs=1e-3)


def _fill_state(policy: str, seed: int):
    nodes, pods = _synthetic(30, 300, seed)
    state = build_cluster(nodes)
    set_task_mix(state, TaskMix.of(p.shape() for p in pods))
    config = Config(actions=("allocate",), gpu_placement=policy)
    return state, config, pods


@pytest.mark.parametrize("policy", ["fgd", "fragmentation"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_index_choice_equals_the_full_ordering(policy, seed):
    """The incremental index picks what scoring every node picks, all along a fill."""
    state, config, pods = _fill_state(policy, seed)
    session = open_session(state, config, 0.0)
    checked = 0
    for i, tp in enumerate(pods):
        pod = tp.to_pod()
        state.upsert_job(tp.to_job("trace", created_at=float(i)))
        state.upsert_pod(pod)
        fits = [f for f in ordered_fits(session, pod)]
        fit = best_fit(session, pod)
        if not fits:
            assert fit is None
        else:
            want = fits[0]
            assert (fit.node, fit.gpu_indices, fit.now) == (want.node, want.gpu_indices, want.now)
            checked += 1
            state.set_pod(pod, PodStatus.RUNNING, fit.node, fit.gpu_indices, fit.portion)
    assert checked > 100


def test_rules_differ_from_binpack():
    nodes, pods = _synthetic(40, 600, 9)
    runs = {p: run_fill(nodes, pods, p, 4) for p in ("binpack", "fgd", "fragmentation")}
    placed = {p: [s.node for s in r.steps] for p, r in runs.items()}
    assert placed["fgd"] != placed["binpack"]
    assert placed["fragmentation"] != placed["binpack"]


def test_published_score():
    from gpushare.scheduler.frag_placement import published_score

    # floor(100 * sigmoid(-growth / 1000))
    assert [published_score(g) for g in (0, 1000, -1000, 40, 10**9)] == [50, 26, 73, 49, 0]


def _choose(policy, nodes, running, mix, new):
    """Where ``new`` goes under ``policy``: nodes ``(name, gpus, millicores)``, running
    pods ``(TracePod, node, gpu index)``."""
    from gpushare.model.node import Node
    from gpushare.model.queue import Queue
    from gpushare.scheduler.fragmentation import GPU_PRODUCT_LABEL
    from gpushare.scheduler.state import ClusterState

    state = ClusterState()
    for name, gpus, cpu in nodes:
        state.upsert_node(Node(name, gpus=gpus, cpu_millis=cpu,
                               labels={GPU_PRODUCT_LABEL: "T4"}))
    state.upsert_queue(Queue("q"))
    for tp, node, index in running:
        state.upsert_job(tp.to_job("q"))
        pod = tp.to_pod()
        state.upsert_pod(pod)
        state.set_pod(pod, PodStatus.RUNNING, node, (index,), tp.gpu_milli)
    set_task_mix(state, mix)
    state.upsert_job(new.to_job("q"))
    pod = new.to_pod()
    state.upsert_pod(pod)
    fit = best_fit(open_session(state, Config(gpu_placement=policy), 0.0), pod)
    return fit.node, fit.gpu_indices


def test_gpu_choice_of_the_two_rules():
    """fgd: the truncated score per GPU, lowest index on ties; fragmentation: the least
    growth of room waste, then the exact growth of fragmentation, then the fullest GPU."""
    from gpushare.scheduler.fragmentation import TaskShape

    # GPU 1 keeps 310 free: a fragment for the 400s. On GPU 0 fragmentation does not grow
    # (990 left); on GPU 1 it shrinks by 10 (300 left). Truncated, both score 50: fgd
    # takes the lower index. Room waste falls by 10 on both; the exact figure prefers GPU 1.
    args = ([("n", 2, 64_000)], [(TracePod("old", 0, 0, 1, 690), "n", 1)],
            TaskMix(((TaskShape(0, 1, 400), 1.0),)), TracePod("new", 0, 0, 1, 10))
    assert _choose("fgd", *args) == ("n", (0,))
    assert _choose("fragmentation", *args) == ("n", (1,))
    # Tasks of 300 and 400: a 300 beside a running 400 leaves 300 free, a fragment for the
    # 400s (fgd keeps it off GPU 1); but that room is filled exactly by the next 300,
    # while the whole GPU it would open keeps 700, whose expected waste is 25 (room waste
    # falls by 100 on GPU 1, by 37.5 on GPU 0).
    mix = TaskMix(((TaskShape(0, 1, 300), 0.5), (TaskShape(0, 1, 400), 0.5)))
    args = ([("n", 2, 64_000)], [(TracePod("old", 0, 0, 1, 400), "n", 1)], mix,
            TracePod("new", 0, 0, 1, 300))
    assert _choose("fgd", *args) == ("n", (0,))
    assert _choose("fragmentation", *args) == ("n", (1,))


def test_a_fraction_goes_to_the_node_where_room_waste_grows_least_before_the_score():
    """Tasks of 300 and 400; a 300 arrives. On "b" (one GPU, a 400 running) it leaves 300
    free: a fragment for the 400s, so FGD's figure grows by 150 (score 46), while on the
    empty "a" it does not grow (score 50): fgd takes "a". Room waste falls by 100 on "b"
    (W(600) = 100 to W(300) = 0, the next 300 fills it exactly) and by 37.5 on "a"
    (W(1000) = 62.5 to W(700) = 25): fragmentation takes "b", room waste before score."""
    from gpushare.scheduler.fragmentation import TaskShape, room_waste

    mix = TaskMix(((TaskShape(0, 1, 300), 0.5), (TaskShape(0, 1, 400), 0.5)))
    w = room_waste(mix)
    assert (w[1000], w[700], w[600], w[300]) == (62.5, 25.0, 100.0, 0.0)
    args = ([("a", 1, 64_000), ("b", 1, 64_000)], [(TracePod("old", 0, 0, 1, 400), "b", 0)],
            mix, TracePod("new", 0, 0, 1, 300))
    assert _choose("fgd", *args) == ("a", (0,))
    assert _choose("fragmentation", *args) == ("b", (0,))


def test_fragmentation_keeps_the_cpu_the_free_gpus_need():
    """Equal scores: fgd follows its fixed node order ("c" before "d"); fragmentation first
    takes the node where a GPU pod leaves the CPU reserve for the node's free GPUs, and
    its figure counts the GPUs a node's CPU can no longer feed."""
    from gpushare.scheduler.fragmentation import TaskShape

    mix = TaskMix(((TaskShape(8000, 1, 1000), 1.0),))  # 8 cores per GPU
    # A 4-core GPU pod on "c" (14 cores) leaves 10 for 3 free GPUs, under the reserve of
    # 0.5 x 8 cores each; on "d" (64 cores) plenty. Neither figure grows on either node.
    nodes = [("c", 4, 14_000), ("d", 4, 64_000)]
    gpu_pod = TracePod("gpu", 4000, 0, 1, 1000)
    assert _choose("fgd", nodes, [], mix, gpu_pod)[0] == "c"
    assert _choose("fragmentation", nodes, [], mix, gpu_pod)[0] == "d"
    # A 6-core pod without GPUs on "c" (16 cores) leaves 10: enough for one 8-core GPU task
    # (FGD's figure does not grow) but not for feeding the second GPU too (the CPU-aware
    # figure grows by a GPU); on "d" (100 cores) neither grows.
    nodes = [("c", 2, 16_000), ("d", 2, 100_000)]
    cpu_pod = TracePod("cpu", 6000, 0, 0, 0)
    assert _choose("fgd", nodes, [], mix, cpu_pod)[0] == "c"
    assert _choose("fragmentation", nodes, [], mix, cpu_pod)[0] == "d"


def test_cli_json_ends_with_one_summary_per_policy_and_seed(tmp_path):
    plot = tmp_path / "fill.png"
    out = subprocess.run(
        [sys.executable, "-m", "gpushare.cli.main", "simulate", "trace", "--nodes",
         str(HERE / "tiny_nodes.csv"), "--pods", str(HERE / "tiny_pods.csv"), "--json",
         "--policy", "fgd", "--policy", "binpack", "--seed", "1", "--seed", "2",
         "--plot", str(plot)],
        capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    summaries = [x for x in lines if x["kind"] == "summary"]
    assert lines[-4:] == summaries
    assert [(s["policy"], s["seed"]) for s in summaries] == [
        ("fgd", 1), ("fgd", 2), ("binpack", 1), ("binpack", 2)]
    assert {x["kind"] for x in lines[:-4]} == {"step"}
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_reports_a_bad_row_and_exits_two(tmp_path):
    bad = tmp_path / "pods.csv"
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,x\n")
    out = subprocess.run(
        [sys.executable, "-m", "gpushare.cli.main", "simulate", "trace", "--nodes",
         str(HERE / "tiny_nodes.csv"), "--pods", str(bad)],
        capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2
    assert f"{bad}:2: gpu_milli: expected a whole number" in out.stderr


def test_timeline_mode_reports_queues_and_waits():
    out = subprocess.run(
        [sys.executable, "-m", "gpushare.cli.main", "simulate", "trace", "--nodes",
         str(HERE / "tiny_nodes.csv"), "--pods", str(HERE / "tiny_pods.csv"), "--mode",
         "timeline", "--json", "--policy", "fragmentation"],
        capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.splitlines()[-1])
    assert summary["mode"] == "timeline" and summary["pods"] == 12
    assert set(summary["queues"]) == {"be", "burstable", "ls"}
    assert sum(q["pods"] for q in summary["queues"].values()) == 12
    assert summary["placed"] == 12 and 0 < summary["meanAllocation"] <= 100


def test_leftover_by_node_type_and_failed_shapes_are_counted_by_hand():
    # A T4 node (2 GPUs, 4 cores) and an A10 node (1 GPU, 16 cores). Pods, in order (the
    # demand is the list's own, so none is added or dropped; binpack, no shuffle effect
    # on what fits): a 0.6 fraction with 3.5 cores, a whole A10-only GPU, an 8-GPU pod.
    nodes = [TraceNode("t", 4000, 65536, 2, "T4"), TraceNode("a", 16000, 65536, 1, "A10")]
    pods = [TracePod("frac", 3500, 1024, 1, 600, ("T4",)),
            TracePod("whole", 2000, 1024, 1, 1000, ("A10",)),
            TracePod("big", 1000, 1024, 8, 1000)]
    demand = sum(p.gpu_total for p in pods) / capacity_of(nodes)
    r = run_fill(nodes, pods, "binpack", 3, demand)
    assert {s.pod for s in r.steps} == {"frac", "whole", "big"}
    left = {k: v.as_dict() for k, v in r.left.items()}
    # T4: 0.4 left on the shared GPU and a whole free one, half a core free: stranded.
    assert left["T4x2/4c"] == {"nodes": 1, "capacity": 2000, "free": 1400, "partial": 400,
                               "stranded": 1400, "cpuFree": 500}
    assert left["A10x1/16c"] == {"nodes": 1, "capacity": 1000, "free": 0, "partial": 0,
                                 "stranded": 0, "cpuFree": 14000}
    assert list(left) == ["T4x2/4c", "A10x1/16c"]  # most free first
    assert r.failed == {(8, 1000, 1, ()): 1}
