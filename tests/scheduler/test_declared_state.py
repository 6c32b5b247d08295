"""What the cycles keep between them is declared: no cycle adds an attribute to the state
or the session, and the queue figures the reclaim rules read agree with the session's on
the allocatable share (one rule, read twice)."""

from __future__ import annotations

import random

from scheduler_builders import add_job, cluster, queue

from gpushare.model import PodStatus
from gpushare.model.quantities import as_quantities
from gpushare.scheduler import Config, run_cycle
from gpushare.scheduler.actions.common.figures import QueueFigures
from gpushare.scheduler.cycle import open_session
from gpushare.scheduler.state import ClusterState

PLACEMENTS = ("binpack", "spread")


def _busy_cluster(seed: int) -> ClusterState:
    rnd = random.Random(seed)
    state = cluster(nodes=3, gpus=4)
    state.upsert_queue(queue("root", gpu_quota=-1))
    for q in range(4):
        state.upsert_queue(queue(f"q{q}", "root", gpu_quota=rnd.choice((0, 1, 2, 3)),
                                 gpu_limit=rnd.choice((-1, 4, 6)),
                                 priority=rnd.choice((100, 125))))
    for j in range(10):
        name, where = f"j{j}", f"q{rnd.randrange(4)}"
        if rnd.random() < 0.5:
            add_job(state, name, where, whole=1, status=PodStatus.RUNNING,
                    node=f"node{j % 3}", priority=rnd.choice((10, 50)))
        else:
            add_job(state, name, where, pods=rnd.choice((1, 2)),
                    **rnd.choice(({"whole": 1}, {"portion": 500})),
                    priority=rnd.choice((50, 150)))
    return state


def test_cycles_add_no_attributes_to_the_state_or_the_session() -> None:
    declared_state = set(vars(ClusterState()))
    for seed in range(6):
        for compat in (None, "kai"):
            state = _busy_cluster(seed)
            config = Config(compat=compat, gpu_placement=PLACEMENTS[seed % 2])
            declared_session = set(vars(open_session(state, config, 0.0)))
            for now in (0.0, 10.0, 20.0):
                run_cycle(state, config, now)
            assert set(vars(state)) == declared_state
            session = open_session(state, config, 30.0)
            run_cycle(state, config, 30.0)
            assert set(vars(session)) == declared_session


def test_the_reclaim_rules_read_the_sessions_allocatable_share() -> None:
    for seed in range(20):
        for compat in (None, "kai"):
            state = _busy_cluster(seed)
            session = open_session(state, Config(compat=compat), 0.0)
            figures = QueueFigures(session)
            for name in state.queues:
                assert figures.share(name).allocatable_share() == as_quantities(
                    session.proportion.allocatable_share(name)
                ), name


def test_every_behaviour_switch_is_one_compat_kai_flips() -> None:
    """The Behaviour object holds exactly the switches where gpushare's default differs
    from KAI: each boolean field reads one way by default and the other under kai."""
    from dataclasses import fields

    from gpushare.scheduler.behaviour import Behaviour

    default, kai = Behaviour.of(Config()), Behaviour.of(Config(compat="kai"))
    switches = [f.name for f in fields(Behaviour) if f.type in ("bool", bool)]
    assert len(switches) >= 15
    assert [n for n in switches if getattr(default, n) == getattr(kai, n)] == []
    assert (default.fairshare_mode, kai.fairshare_mode) == ("exact", "kai")
