"""Placement strategies are objects looked up by name; one in the registry drives the choice."""

from dataclasses import dataclass

import pytest
from scheduler_builders import add_job, cluster, queue

from gpushare.model.schema import ScenarioError
from gpushare.scheduler import Config, run_cycle
from gpushare.scheduler.frag_placement import FGD, FRAGMENTATION
from gpushare.scheduler.nodeplacement import BINPACK, SPREAD, Binpack
from gpushare.scheduler.placement_registry import (
    PLACEMENT_STRATEGIES,
    placement_strategy,
    placement_strategy_names,
)
from gpushare.simulator.scenario import parse


def test_builtin_strategies_by_name_and_unknown_name_fails_with_known_ones():
    assert placement_strategy("binpack") is BINPACK
    assert placement_strategy("spread") is SPREAD
    known = r"unknown placement strategy 'tight' \(known: [a-z, -]*binpack, [a-z, -]*spread"
    with pytest.raises(ValueError, match=known):
        placement_strategy("tight")


def test_binpack_and_spread_scores_agree_with_their_index_keys():
    figures = [(3000, 8000), (1000, 8000), (5000, 8000), (0, 0)]
    for strategy in (BINPACK, SPREAD):
        scores = strategy.scores(figures)
        by_score = sorted(range(3), key=lambda i: (-scores[i], f"n{i}"))
        by_key = sorted(range(3), key=lambda i: strategy.index_key(*figures[i], f"n{i}"))
        assert by_score == by_key, strategy.name
    assert BINPACK.scores(figures)[1] == 9.0 and SPREAD.scores(figures)[2] == 5000 / 8000


@dataclass(frozen=True, slots=True)
class EmptiestGpu(Binpack):
    """Binpack across nodes, but a fraction starts on the emptiest GPU of the node."""

    name: str = "test-emptiest-gpu"

    def gpu_order(self, fill: int) -> int:
        return fill


def test_a_registered_strategy_is_accepted_by_name_and_chooses_the_gpu(monkeypatch):
    monkeypatch.setitem(PLACEMENT_STRATEGIES, "test-emptiest-gpu", EmptiestGpu())
    assert "test-emptiest-gpu" in placement_strategy_names()
    chosen = {}
    for name in ("binpack", "test-emptiest-gpu"):
        state = cluster(gpus=2)
        state.upsert_queue(queue("q", gpu_quota=-1))
        config = Config(actions=("allocate",), gpu_placement=name)
        add_job(state, "first", "q", portion=500)
        run_cycle(state, config, 0)
        add_job(state, "second", "q", portion=250)
        chosen[name] = run_cycle(state, config, 0).binds[0].gpu_indices
    assert chosen == {"binpack": (0,), "test-emptiest-gpu": (1,)}


def test_the_registry_names_each_strategy_by_its_own_name():
    """The literal table holds every strategy, each under the name configs use for it."""
    assert PLACEMENT_STRATEGIES == {"binpack": BINPACK, "spread": SPREAD, "fgd": FGD,
                                    "fragmentation": FRAGMENTATION}
    assert all(name == s.name for name, s in PLACEMENT_STRATEGIES.items())


def test_scenario_with_an_unknown_placement_names_the_field():
    doc = {"format": 1, "name": "x", "config": {"placement": {"gpu": "tight"}},
           "nodes": [], "queues": [], "jobs": [], "expect": {}}
    with pytest.raises(ScenarioError, match=r"config\.placement"):
        parse(doc)


def test_spread_keys_order_ratios_exactly_as_fractions_do():
    import random
    from fractions import Fraction

    rng = random.Random(7)
    figures = [(0, 8000), (8000, 8000), (1, 3), (2, 6), (333, 999), (5, 7000), (5, 7001)]
    figures += [(f, t) for t in (rng.randrange(1, 3_000_000) for _ in range(300))
                for f in (rng.randrange(0, t + 1),)]
    figures.append((1, (1 << 26) + 1))  # above the float bound: a Fraction key
    names = [f"n{i:03d}" for i in range(len(figures))]
    by_key = sorted(range(len(figures)), key=lambda i: SPREAD.index_key(*figures[i], names[i]))
    exact = sorted(range(len(figures)), key=lambda i: (-Fraction(*figures[i]), names[i]))
    assert by_key == exact
