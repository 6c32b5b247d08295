"""Exact pre-checks of the victim search: a job whose candidate victims could never make
room is given up without a simulation, and one they can make room for is still solved."""

from __future__ import annotations

from typing import Any

from test_victim_actions import PENDING, job, queue, running, scenario, search_on


def _solve(data: dict[str, Any], victims: list[str], asking: str = "p"):
    """Solve the asking job's next step with the named jobs as the only candidates and a
    validator that accepts everything. Returns (outcome, stats)."""
    state, session, search = search_on(
        data,
        lambda j, step: {queue: (lambda v: v.name in victims) for queue in state.queues},
        lambda outcome: True,
    )
    jobs = state.jobs
    asking_job = jobs[f"default/{asking}"]
    stmt = state.statement()
    outcome = search.solve(stmt, asking_job, session.gang(asking_job).next_step())
    stmt.discard()
    return outcome, search.budget.stats


def _one_node(gpus: int, running_jobs: list[dict[str, Any]], asking_gpus: float = 1):
    return scenario(
        [{"name": "n0", "gpus": gpus}],
        [queue("q0", quota=gpus)],
        [*running_jobs, job("p", "q0", [PENDING], gpus=asking_gpus, priority=75)],
    )


def test_no_candidate_victims_skips_the_search():
    data = _one_node(1, [job("v", "q0", [running("n0")], priority=50)])
    outcome, stats = _solve(data, victims=[])
    assert outcome is None
    assert (stats.prechecked, stats.simulations) == (1, 0)


def test_a_candidate_victim_is_still_simulated():
    data = _one_node(1, [job("v", "q0", [running("n0")], priority=50)])
    outcome, stats = _solve(data, victims=["v"])
    assert outcome is not None and [p.name for p in outcome.evicted] == ["v-0"]
    assert (stats.prechecked, stats.simulations) == (0, 1)


def _gpu_and_cpu_jobs():
    return [
        job("holder", "q0", [running("n0")], priority=50),
        job("cpu", "q0", [running("n0")], gpus=0, priority=50),
    ]


def test_victims_that_free_no_gpu_skip_a_gpu_step():
    outcome, stats = _solve(_one_node(1, _gpu_and_cpu_jobs()), victims=["cpu"])
    assert outcome is None
    assert (stats.prechecked, stats.simulations) == (1, 0)


def test_victims_that_free_the_gpu_are_simulated():
    outcome, stats = _solve(_one_node(1, _gpu_and_cpu_jobs()), victims=["cpu", "holder"])
    assert outcome is not None and "holder-0" in [p.name for p in outcome.evicted]
    assert stats.prechecked == 0


def _two_nodes_one_gpu_each():
    return scenario(
        [{"name": "n0", "gpus": 1}, {"name": "n1", "gpus": 1}],
        [queue("q0", quota=2)],
        [
            job("a", "q0", [running("n0")], priority=50),
            job("b", "q0", [running("n1")], priority=50),
            job("p", "q0", [PENDING], gpus=2, priority=75),
        ],
    )


def test_gpus_freed_on_separate_nodes_do_not_make_room_for_one_larger_pod():
    outcome, stats = _solve(_two_nodes_one_gpu_each(), victims=["a", "b"])
    assert outcome is None
    assert (stats.prechecked, stats.simulations) == (1, 0)


def test_gpus_freed_on_one_node_make_room_for_a_larger_pod():
    data = scenario(
        [{"name": "n0", "gpus": 2}],
        [queue("q0", quota=2)],
        [
            job("a", "q0", [running("n0")], priority=50),
            job("b", "q0", [running("n0")], priority=50),
            job("p", "q0", [PENDING], gpus=2, priority=75),
        ],
    )
    outcome, stats = _solve(data, victims=["a", "b"])
    assert outcome is not None and sorted(p.name for p in outcome.evicted) == ["a-0", "b-0"]
    assert stats.prechecked == 0
