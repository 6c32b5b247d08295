"""The eviction actions' search budget (``victimSearchBudget``): a cycle's searching is
bounded, a search cut short is reported, and the jobs searched for in a cycle that ran out
go after the others in the next, so a job that keeps failing cannot hold up the rest."""

from __future__ import annotations

import pytest
from test_victim_actions import NOW, PENDING, job, queue, running, scenario

from gpushare.scheduler import Config, run_cycle
from gpushare.scheduler.actions.common.options import DEFAULT_SEARCH_BUDGET, VictimOptions
from gpushare.simulator import ScenarioError, build_state, parse, settle


def _stuck_then_possible(**config):
    # q1's job A comes first in fair order (the older queue) but can never run: it asks for
    # a node that does not exist. q2's job B can reclaim the GPU that q0 holds over its
    # quota.
    nowhere = {"state": "Pending", "nodeSelector": {"pool": "b"}}
    return scenario(
        [{"name": "n0", "gpus": 1, "labels": {"pool": "a"}}],
        [queue("q0", quota=0), queue("q1", quota=1, createdSecondsAgo=20),
         queue("q2", quota=1, createdSecondsAgo=10)],
        [job("v", "q0", [running("n0")], age=100),
         job("a", "q1", [nowhere], age=5), job("b", "q2", [PENDING], age=5)],
        actions=["allocate", "reclaim"],
        **config,
    )


def _run(data, cycles):
    sc = parse(data)
    state = build_state(sc)
    results = []
    for c in range(cycles):
        if c:
            settle(state, NOW)
        results.append(run_cycle(state, sc.config, NOW))
    return state, results


def test_without_a_budget_every_job_is_searched_for_in_one_cycle():
    state, [result] = _run(_stuck_then_possible(victimSearchBudget=0), 1)
    assert result.searches["reclaim"]["jobs"] == 2
    assert result.searches["reclaim"]["budget_ran_out"] == 0
    assert state.pods["default/b-0"].status.value == "Pipelined"


def test_a_spent_budget_stops_the_action_and_the_next_cycle_serves_the_others_first():
    state, results = _run(_stuck_then_possible(victimSearchBudget=1), 2)
    first, second = results
    # Cycle 1: the first search (A's, which fails) always runs; then the budget is spent.
    assert first.searches["reclaim"] == {
        "jobs": 1, "work": first.searches["reclaim"]["work"], "steps": 0, "simulations": 0,
        "succeeded": 0, "budget_ran_out": 1,
    }
    assert "default/b" in first.pending_reasons  # still pending, for allocate's reason
    # Cycle 2: A had its turn, so B is searched for first, and reclaims.
    assert second.searches["reclaim"]["succeeded"] == 1
    assert state.pods["default/b-0"].status.value == "Pipelined"
    assert state.pods["default/v-0"].status.value == "Releasing"


def test_a_search_cut_short_says_so_in_the_pending_reason():
    # Enough for A's search and for starting B's, not for B to read a victim.
    state, [result] = _run(_stuck_then_possible(victimSearchBudget=300), 1)
    assert result.searches["reclaim"]["jobs"] == 2
    assert result.searches["reclaim"]["budget_ran_out"] == 1
    assert "victim search budget (300 units of work) ran out" in result.pending_reasons["default/b"]
    assert state.pods["default/v-0"].status.value == "Running"  # nothing half-done


def test_the_budget_defaults_and_is_off_under_kai():
    assert VictimOptions.of(Config()).search_budget == DEFAULT_SEARCH_BUDGET
    assert VictimOptions.of(Config(compat="kai")).search_budget == 0
    assert VictimOptions.of(
        Config(compat="kai", extra={"victimSearchBudget": 50})
    ).search_budget == 50


@pytest.mark.parametrize("value", [-1, 2.5, "many", True])
def test_a_bad_budget_names_the_key(value):
    with pytest.raises(ScenarioError) as err:
        parse(_stuck_then_possible(victimSearchBudget=value))
    assert "config.victimSearchBudget" in str(err.value)


def test_a_cycle_that_spent_its_budget_asks_the_loop_for_another():
    from gpushare.controllers.scheduling.scheduler_loop import work_left

    _, [spent] = _run(_stuck_then_possible(victimSearchBudget=1), 1)
    _, [done] = _run(_stuck_then_possible(victimSearchBudget=0), 1)
    assert work_left(spent) and not work_left(done)
