"""The eviction actions end to end on small clusters (scenario-format dicts, one rule per
test)."""

from __future__ import annotations

from typing import Any

import pytest

from gpushare.scheduler import run_cycle
from gpushare.scheduler.actions.common.solver import Search, SearchRules
from gpushare.scheduler.cycle import open_session
from gpushare.simulator import ScenarioError, build_state, parse, settle

NOW = 0.0


def scenario(
    nodes: list[dict[str, Any]],
    queues: list[dict[str, Any]],
    jobs: list[dict[str, Any]],
    actions: list[str] | None = None,
    **config: Any,
) -> dict[str, Any]:
    data: dict[str, Any] = {
        "format": 1,
        "name": "t",
        "config": {"stalenessGracePeriodSeconds": 0, **config},
        "nodes": nodes,
        "queues": queues,
        "jobs": jobs,
    }
    if actions is not None:
        data["actions"] = actions
    return data


def queue(name: str, quota: float = 0, weight: float = 1, parent: str | None = None, **extra):
    return {"name": name, "parent": parent,
            "resources": {"gpu": {"quota": quota, "limit": -1, "overQuotaWeight": weight}},
            **extra}


def job(name: str, queue_name: str, pods: list[dict[str, Any]], gpus: float = 1,
        priority: int = 50, age: float = 0, **extra):
    return {"name": name, "queue": queue_name, "priority": priority, "createdSecondsAgo": age,
            "resources": {"gpus": gpus}, "tasks": pods, **extra}


def running(node: str, **extra):
    return {"state": "Running", "node": node, **extra}


PENDING = {"state": "Pending"}


def cycle(data: dict[str, Any], cycles: int = 1) -> dict[str, tuple[str, str | None]]:
    """Pod name -> (status, node) after the given number of cycles."""
    sc = parse(data)
    state = build_state(sc)
    for c in range(cycles):
        if c:
            settle(state, NOW)
        run_cycle(state, sc.config, NOW)
    return {p.name: (p.status.value, p.node) for p in state.pods.values()}


def search_on(data: dict[str, Any], candidates, validator, **options):
    """A preempt-style search on the scenario's state with the given candidates and
    validator. Returns (state, session, search)."""
    sc = parse(data)
    state = build_state(sc)
    session = open_session(state, sc.config, NOW)
    search = Search(session, SearchRules(action="preempt", reason="test",
                                         candidates=candidates, validator=validator, **options))
    return state, session, search


def decisions(data: dict[str, Any]) -> tuple:
    sc = parse(data)
    state = build_state(sc)
    result = run_cycle(state, sc.config, NOW)
    return (
        tuple((b.pod, b.node, b.gpu_indices) for b in result.binds),
        tuple((p.pod, p.node, p.gpu_indices) for p in result.pipelines),
        tuple((e.pod, e.action) for e in result.evictions),
    )


# ---------------------------------------------------------------------------- preempt
def _one_gpu_node_with(victim_priority: int, preemptor_priority: int, same_queue: bool = True,
                       **victim_extra):
    return scenario(
        [{"name": "n0", "gpus": 1}],
        [queue("q0", quota=1), queue("q1", quota=1, priority=200)],
        [
            job("victim", "q0", [running("n0")], priority=victim_priority, age=1,
                **victim_extra),
            job("preemptor", "q0" if same_queue else "q1", [PENDING], priority=preemptor_priority,
                age=100),
        ],
        actions=["preempt"],
    )


def test_preempt_takes_a_strictly_lower_priority_job_of_the_same_queue():
    out = cycle(_one_gpu_node_with(50, 75))
    assert out["victim-0"] == ("Releasing", "n0")
    assert out["preemptor-0"] == ("Pipelined", "n0")


@pytest.mark.parametrize("victim_priority", [75, 90])
def test_preempt_never_takes_equal_or_higher_priority(victim_priority):
    out = cycle(_one_gpu_node_with(victim_priority, 75))
    assert out["victim-0"][0] == "Running"
    assert out["preemptor-0"][0] == "Pending"


def test_preempt_stays_inside_the_queue():
    out = cycle(_one_gpu_node_with(50, 75, same_queue=False))
    assert out["victim-0"][0] == "Running"


def test_non_preemptible_jobs_are_never_victims():
    out = cycle(_one_gpu_node_with(50, 75, preemptibility="non-preemptible"))
    assert out["victim-0"][0] == "Running"


def test_preemption_delay_keeps_a_young_job_from_evicting():
    young = _one_gpu_node_with(50, 75)
    young["jobs"][1]["preemptionDelaySeconds"] = 30
    young["jobs"][1]["createdSecondsAgo"] = 10
    assert cycle(young)["victim-0"][0] == "Running"
    old = _one_gpu_node_with(50, 75)
    old["jobs"][1]["preemptionDelaySeconds"] = 30
    old["jobs"][1]["createdSecondsAgo"] = 40
    assert cycle(old)["victim-0"][0] == "Releasing"


def test_preempt_min_runtime_protects_a_recently_started_victim():
    data = _one_gpu_node_with(50, 75)
    data["queues"][0]["preemptMinRuntimeSeconds"] = 600
    data["jobs"][0]["tasks"] = [running("n0", runningSeconds=60)]
    assert cycle(data)["victim-0"][0] == "Running"
    data["jobs"][0]["tasks"] = [running("n0", runningSeconds=601)]
    assert cycle(data)["victim-0"][0] == "Releasing"


def test_min_runtime_lets_an_elastic_victim_lose_only_its_surplus():
    data = scenario(
        [{"name": "n0", "gpus": 2}],
        [queue("q0", quota=2, preemptMinRuntimeSeconds=600)],
        [
            job("victim", "q0", [running("n0", runningSeconds=5)] * 2, priority=50, age=100,
                minMember=1),
            job("small", "q0", [PENDING], priority=75, age=10),
            job("big", "q0", [PENDING], gpus=2, priority=75, age=5),
        ],
        actions=["preempt"],
    )
    out = cycle(data)
    assert out["victim-1"][0] == "Releasing" and out["victim-0"][0] == "Running"
    assert out["small-0"][0] == "Pipelined"
    assert out["big-0"][0] == "Pending"


@pytest.mark.parametrize(("compat", "status"), [(None, "Binding"), ("kai", "Pipelined")])
def test_a_preemptor_that_fits_on_free_capacity_binds(compat, status):
    # The queue's limit of 2 GPUs blocks the 2-GPU job until the 1-GPU victim goes; the
    # node has two free GPUs, so the job could start now: gpushare binds it, KAI pipelines.
    data = scenario(
        [{"name": "n0", "gpus": 3}],
        [{"name": "q0", "resources": {"gpu": {"quota": 2, "limit": 2, "overQuotaWeight": 1}}}],
        [job("victim", "q0", [running("n0")], priority=50, age=10),
         job("p", "q0", [PENDING], gpus=2, priority=75, age=100)],
    )
    if compat:
        data["config"]["compat"] = compat
    out = cycle(data)
    assert out["victim-0"][0] == "Releasing"
    assert out["p-0"] == (status, "n0")


def test_victims_go_whole_gang_by_whole_gang():
    data = scenario(
        [{"name": "n0", "gpus": 4}],
        [queue("q0", quota=4)],
        [
            job("gang", "q0", [running("n0")] * 3, priority=50, age=100),  # minMember 3
            job("solo", "q0", [running("n0")], priority=50, age=200),
            job("p", "q0", [PENDING], priority=75),
        ],
        actions=["preempt"],
    )
    out = cycle(data)
    gang = [out[f"gang-{i}"][0] for i in range(3)]
    # The newest job is the victim, and all of its gang goes, not one pod of it.
    assert gang == ["Releasing"] * 3
    assert out["solo-0"][0] == "Running"


# ------------------------------------------------------------------------------ reclaim
def _alice_bob(compat: str | None):
    jobs = [job(f"a{i}", "alice", [running(f"n{i // 4}")], age=1000 - i) for i in range(8)]
    jobs += [job(f"b{i}", "bob", [PENDING], age=100 - i) for i in range(6)]
    data = scenario(
        [{"name": "n0", "gpus": 4}, {"name": "n1", "gpus": 4}],
        [queue("shared"), queue("alice", quota=1, parent="shared"),
         queue("bob", quota=1, parent="shared")],
        jobs,
    )
    if compat:
        data["config"]["compat"] = compat
    return data


@pytest.mark.parametrize("compat", [None, "kai"])
def test_a_queue_below_its_fair_share_reclaims_up_to_its_fair_share(compat):
    out = cycle(_alice_bob(compat), cycles=4)
    bob = sum(1 for n, (status, _) in out.items() if n.startswith("b") and status == "Running")
    alice = sum(1 for n, (status, _) in out.items() if n.startswith("a") and status == "Running")
    # Fair share is 4 / 4: bob gets past its quota of 1, and no further.
    assert (alice, bob) == (4, 4)


def _reclaim_one(**victim_queue):
    return scenario(
        [{"name": "n0", "gpus": 1}],
        [queue("q0", quota=0, **victim_queue), queue("q1", quota=1)],
        [job("v", "q0", [running("n0", runningSeconds=60)], age=100), job("p", "q1", [PENDING])],
        actions=["reclaim"],
    )


def test_reclaim_takes_from_a_queue_over_its_share():
    assert cycle(_reclaim_one())["v-0"][0] == "Releasing"


def test_reclaim_min_runtime_protects_a_recently_started_victim():
    assert cycle(_reclaim_one(reclaimMinRuntimeSeconds=600))["v-0"][0] == "Running"
    assert cycle(_reclaim_one(reclaimMinRuntimeSeconds=30))["v-0"][0] == "Releasing"


def _unusable_free_gpus(pending_pods: int, compat: str | None = None, **config):
    # Pool x (3 nodes of A, 1 of C, all full) and an empty pool-y node that nobody may
    # use. The fair share is capped by demand, so while the y GPUs are free nobody is
    # above it; by weight each of A, B (idle) and C is entitled to 16 of the 48 GPUs.
    x = {"pool": "x"}
    nodes = [{"name": f"x{i}", "gpus": 8, "labels": x} for i in range(4)]
    nodes.append({"name": "y0", "gpus": 16, "labels": {"pool": "y"}})
    jobs = [job(f"a{i}", "a", [running(f"x{i // 8}", nodeSelector=x)], age=1000 - i)
            for i in range(24)]
    jobs += [job(f"c{i}", "c", [running("x3", nodeSelector=x)], age=500 - i) for i in range(8)]
    jobs.append(job("want", "c", [{"state": "Pending", "nodeSelector": x}] * pending_pods,
                    gpus=8, age=1))
    data = scenario(nodes, [queue("a"), queue("b"), queue("c")], jobs, actions=["reclaim"],
                    **config)
    if compat:
        data["config"]["compat"] = compat
    return data


def test_steady_fair_share_reclaim_helps_a_queue_below_its_weighted_share():
    assert cycle(_unusable_free_gpus(1))["want-0"][0] == "Pipelined"
    evicted = [n for n, (status, _) in cycle(_unusable_free_gpus(1)).items()
               if status == "Releasing"]
    assert sorted(evicted) == sorted(f"a{i}-0" for i in range(16, 24))  # A keeps its 16
    # KAI reclaims on the demand-capped fair share only, and so does the option off.
    assert cycle(_unusable_free_gpus(1, "kai"))["want-0"][0] == "Pending"
    assert cycle(_unusable_free_gpus(1, steadyFairShareReclaim=False))["want-0"][0] == "Pending"


def test_steady_fair_share_reclaim_settles():
    # Over several full cycles the job runs, A keeps 16 and nothing moves back and forth.
    data = _unusable_free_gpus(1)
    del data["actions"]
    out = cycle(data, cycles=5)
    assert out["want-0"] == ("Running", "x2")
    assert sum(1 for n, (st, _) in out.items() if n.startswith("a") and st == "Running") == 16


def test_steady_fair_share_reclaim_never_takes_a_queue_below_its_share():
    # Two 8-GPU pods would leave A with 8 of its 16: refused.
    assert cycle(_unusable_free_gpus(2))["want-0"][0] == "Pending"


def test_reclaim_never_takes_from_a_queue_within_its_quota():
    data = scenario(
        [{"name": "n0", "gpus": 2}],
        [queue("q0", quota=2), queue("q1", quota=2)],
        [job("r", "q0", [running("n0")] * 2, age=100, minMember=1),
         job("p", "q1", [PENDING])],
        actions=["reclaim"],
    )
    assert all(cycle(data)[f"r-{i}"][0] == "Running" for i in range(2))


def _consolidating_reclaim(**config):
    # q0 is over its share on n0 (4 one-GPU jobs); q1 wants 1 GPU. Only a move makes room
    # for a 4-GPU q1 job on n0 while the victims fit on n1.
    return scenario(
        [{"name": "n0", "gpus": 4}, {"name": "n1", "gpus": 4}],
        [queue("q0", quota=0, weight=1), queue("q1", quota=4, weight=1)],
        [job(f"v{i}", "q0", [running("n0")], age=100 - i) for i in range(4)]
        + [job("w", "q0", [running("n1")], gpus=1, age=200)]
        + [job("p", "q1", [PENDING], gpus=4)],
        actions=["reclaim"],
        **config,
    )


def _disrupted(out: dict[str, tuple[str, str | None]]) -> int:
    return sum(1 for name, (status, _) in out.items() if name[0] in "vw" and status != "Running")


def test_consolidating_reclaim_is_bounded_by_the_disruption_ratio():
    # KAI moves three pods and evicts a fourth (4 GPUs disrupted for 4 asked) ...
    kai = cycle(_consolidating_reclaim(compat="kai"))
    assert kai["p-0"] == ("Pipelined", "n0") and _disrupted(kai) == 4
    # ... with at most 0.5x the request disrupted by moves, one eviction on n1 does it.
    bounded = cycle(_consolidating_reclaim(maxDisruptionRatio=0.5))
    assert bounded["p-0"] == ("Pipelined", "n1") and _disrupted(bounded) == 1
    # compat: kai ignores the bound.
    assert cycle(_consolidating_reclaim(compat="kai", maxDisruptionRatio=0.5)) == kai


def test_reclaimed_victims_that_fit_elsewhere_are_moved_not_evicted():
    out = cycle(_consolidating_reclaim(compat="kai"))
    moved = [out[f"v{i}-0"] for i in range(4) if out[f"v{i}-0"][0] == "Pipelined"]
    assert moved and all(node == "n1" for _, node in moved)


# -------------------------------------------------------------------------- consolidation
def _fragmented(**config):
    return scenario(
        [{"name": "n0", "gpus": 2}, {"name": "n1", "gpus": 2}],
        [queue("q0", quota=4)],
        [job("a", "q0", [running("n0")], age=100), job("b", "q0", [running("n1")], age=50),
         job("p", "q0", [PENDING], gpus=2, age=200)],
        actions=["consolidation"],
        **config,
    )


def test_consolidation_moves_a_pod_so_a_pending_job_fits():
    out = cycle(_fragmented())
    assert out["p-0"][0] == "Pipelined"
    assert sorted([out["a-0"][0], out["b-0"][0]]) == ["Pipelined", "Running"]


def test_a_moved_pod_is_both_evicted_and_pipelined():
    # The cycle's decisions tell the caller to delete the running pod (its workload
    # re-creates it) and where it will go.
    _, pipelines, evictions = decisions(_fragmented())
    moved = [e for e in evictions if e[1] == "consolidation"]
    assert len(moved) == 1
    assert moved[0][0] in {pod for pod, _, _ in pipelines}


@pytest.mark.parametrize(
    "config",
    [{"maxConsolidationPreemptees": 0}, {"placement": {"gpu": "spread", "cpu": "binpack"}},
     {"placement": {"gpu": "binpack", "cpu": "spread"}}],
)
def test_consolidation_off(config):
    out = cycle(_fragmented(**config))
    assert out["p-0"][0] == "Pending"
    assert out["a-0"][0] == out["b-0"][0] == "Running"


def test_consolidation_never_evicts_for_good():
    # The pool's two GPUs are taken; moving b for p would leave b nowhere to go (the free
    # GPU on n2 is outside its pool), so nothing happens.
    pool = {"pool": "a"}
    data = scenario(
        [{"name": "n0", "gpus": 1, "labels": pool}, {"name": "n1", "gpus": 1, "labels": pool},
         {"name": "n2", "gpus": 1}],
        [queue("q0", quota=4)],
        [job("a", "q0", [running("n0", nodeSelector=pool)], age=100),
         job("b", "q0", [running("n1", nodeSelector=pool)], age=50),
         job("p", "q0", [{"state": "Pending", "nodeSelector": pool}], gpus=1, age=200)],
        actions=["consolidation"],
    )
    out = cycle(data)
    assert out["a-0"][0] == out["b-0"][0] == "Running"
    assert out["p-0"][0] == "Pending"


def test_consolidation_respects_the_preemptee_cap():
    # Two 1-GPU jobs must both move off n0 for the 3-GPU job; a cap of 1 forbids it.
    data = scenario(
        [{"name": "n0", "gpus": 3}, {"name": "n1", "gpus": 4}],
        [queue("q0", quota=8)],
        [job("a", "q0", [running("n0")], age=100), job("b", "q0", [running("n0")], age=90),
         job("c", "q0", [running("n1")], gpus=2, age=80), job("p", "q0", [PENDING], gpus=3)],
        actions=["consolidation"],
        maxConsolidationPreemptees=1,
    )
    assert cycle(data)["p-0"][0] == "Pending"
    data["config"]["maxConsolidationPreemptees"] = -1
    assert cycle(data)["p-0"][0] == "Pipelined"


# ------------------------------------------------------------------------- stale gangs
def _stale(grace: float | None, stale: float, extra_task: dict | None = None):
    j = job("g", "q0", [running("n0"), extra_task or {"state": "Failed"}], gpus=0, minMember=2,
            staleSeconds=stale)
    if grace is not None:
        j["stalenessGracePeriodSeconds"] = grace
    return scenario([{"name": "n0", "gpus": 0}], [queue("q0")], [j],
                    actions=["stalegangeviction"], stalenessGracePeriodSeconds=60)


@pytest.mark.parametrize(
    ("grace", "stale", "evicted"),
    [(None, 30, False), (None, 60, True), (120, 61, False), (-1, 10_000, False), (0, 0, True)],
)
def test_stale_gang_grace(grace, stale, evicted):
    assert (cycle(_stale(grace, stale))["g-0"][0] == "Releasing") is evicted


def test_a_gang_that_is_finishing_is_not_stale():
    assert cycle(_stale(None, 600, {"state": "Succeeded"}))["g-0"][0] == "Running"


# ------------------------------------------------------------------------ determinism
def test_same_input_same_decisions():
    data = _consolidating_reclaim()
    assert decisions(data) == decisions(data)
    data = _alice_bob(None)
    assert decisions(data) == decisions(data)


# --------------------------------------------------------------------------- options
@pytest.mark.parametrize(
    ("key", "value"),
    [("maxDisruptionRatio", -1), ("reclaimSaturationMultiplier", 0.5),
     ("maxSimulationsPerJob", 0), ("useSchedulingSignatures", "yes")],
)
def test_bad_option_names_the_key(key, value):
    with pytest.raises(ScenarioError) as err:
        parse(_fragmented(**{key: value}))
    assert f"config.{key}" in str(err.value)


@pytest.mark.parametrize(("compat", "expected"), [("kai", 2 * 3), (None, 3)])
def test_simulation_bound_is_honoured(compat, expected):
    # Ten possible victims and a validator that refuses everything: each generator stops
    # after its bound, and the state is left as it was. Outside compat: kai the scenario
    # across nodes for a one-pod step holds only the first node that could host it, which
    # the node-local generator has tried already: it is not simulated again.
    data = scenario(
        [{"name": f"n{i}", "gpus": 1} for i in range(10)],
        [queue("q0", quota=10)],
        [job(f"v{i}", "q0", [running(f"n{i}")], age=100 - i) for i in range(10)]
        + [job("p", "q0", [PENDING], priority=75)],
    )
    if compat:
        data["config"]["compat"] = compat
    state, session, search = search_on(
        data, lambda j, step: {"q0": lambda v: v.key != j.key}, lambda outcome: False,
        max_simulations=3,
    )
    jobs = state.jobs
    preemptor = jobs["default/p"]
    stmt = state.statement()
    assert search.solve(stmt, preemptor, session.gang(preemptor).next_step()) is None
    stmt.discard()
    assert search.budget.stats.simulations == expected
    assert all(p.status.value in ("Running", "Pending") for p in state.pods.values())
