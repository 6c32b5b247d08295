"""Reservation and backfill for gangs that wait too long: the reservation is made,
honoured by every placement, carried between cycles as explicit input, and released."""

from __future__ import annotations

from dataclasses import replace

import pytest
from scheduler_builders import add_job, cluster, queue

from gpushare.model import PodStatus
from gpushare.model.reservation import Reservation
from gpushare.model.schema import ScenarioError
from gpushare.scheduler import Config, run_cycle
from gpushare.scheduler.config_file import parse_config
from gpushare.scheduler.state import ClusterState

RESERVE = Config(actions=("allocate",), reservation_after=600.0)
NOW = 10_000.0
RUNNING = PodStatus.RUNNING


def _starving() -> ClusterState:
    """Two 4-GPU nodes, one GPU of node0 held by a non-preemptible job with no declared
    runtime, and a 2x4-GPU gang waiting for an hour."""
    state = cluster(nodes=2, gpus=4)
    state.upsert_queue(queue("q", gpu_quota=8))
    add_job(state, "busy", "q", whole=1, priority=100, status=RUNNING, node="node0")
    add_job(state, "gang", "q", pods=2, whole=4, created_at=NOW - 3600)
    return state


def test_a_gang_past_its_threshold_reserves_and_small_jobs_are_kept_off() -> None:
    state = _starving()
    add_job(state, "small", "q", whole=1, created_at=NOW - 5)
    result = run_cycle(state, RESERVE, NOW)
    assert result.reservations == {
        "default/gang": Reservation("default/gang", ("node0", "node1"), NOW)}
    assert result.binds == []


def test_before_the_threshold_nothing_is_reserved() -> None:
    state = _starving()
    add_job(state, "small", "q", whole=1, created_at=NOW - 5)
    result = run_cycle(state, RESERVE, NOW - 3600 + 599)
    assert result.reservations == {}
    assert [b.pod for b in result.binds] == ["default/small-0"]


def test_no_threshold_anywhere_means_no_reservation_and_no_change() -> None:
    state = _starving()
    add_job(state, "small", "q", whole=1, created_at=NOW - 5)
    result = run_cycle(state, Config(actions=("allocate",)), NOW)
    assert result.reservations == {} and state.reservations == {}
    assert [b.pod for b in result.binds] == ["default/small-0"]


def test_a_queue_threshold_overrides_the_config_and_negative_switches_it_off() -> None:
    state = _starving()
    state.upsert_queue(replace(state.queues["q"], reservation_after=-1.0))
    assert run_cycle(state, RESERVE, NOW).reservations == {}
    state.upsert_queue(replace(state.queues["q"], reservation_after=60.0))
    result = run_cycle(state, Config(actions=("allocate",)), NOW)
    assert list(result.reservations) == ["default/gang"]


def test_the_reservation_is_released_once_the_gang_is_placed() -> None:
    state = _starving()
    run_cycle(state, RESERVE, NOW)
    assert list(state.reservations) == ["default/gang"]
    state.remove_pod("default/busy-0")
    result = run_cycle(state, RESERVE, NOW + 60)
    assert sorted(b.pod for b in result.binds) == ["default/gang-0", "default/gang-1"]
    assert result.reservations == {} and state.reservations == {}


def test_the_reservation_is_released_when_the_gang_goes_away() -> None:
    state = _starving()
    run_cycle(state, RESERVE, NOW)
    for key in ("default/gang-0", "default/gang-1"):
        state.remove_pod(key)
    state.remove_job("default/gang")
    add_job(state, "small", "q", whole=1, created_at=NOW)
    result = run_cycle(state, RESERVE, NOW + 60)
    assert result.reservations == {}
    assert [b.pod for b in result.binds] == ["default/small-0"]


def test_a_restored_reservation_is_honoured_by_a_fresh_state() -> None:
    # What a restarted scheduler sees: the reservation comes back as input, made an hour
    # ago, and keeps its nodes and its start time.
    state = _starving()
    add_job(state, "small", "q", whole=1, created_at=NOW - 5)
    made = Reservation("default/gang", ("node0", "node1"), NOW - 3000)
    state.reservations = {made.job: made}
    result = run_cycle(state, RESERVE, NOW)
    assert result.reservations == {made.job: made}
    assert result.binds == []


def test_backfill_only_when_the_job_ends_before_the_nodes_are_due() -> None:
    state = _starving()
    state.jobs["default/busy"].expected_runtime = 1000.0
    state.pods["default/busy-0"].started_at = NOW - 200  # due in 800 s
    short = add_job(state, "short", "q", whole=1, created_at=NOW - 5)
    short.expected_runtime = 700.0
    long = add_job(state, "long", "q", whole=1, created_at=NOW - 4)
    long.expected_runtime = 900.0
    add_job(state, "undeclared", "q", whole=1, created_at=NOW - 3)
    result = run_cycle(state, RESERVE, NOW)
    assert list(result.reservations) == ["default/gang"]
    assert [b.pod for b in result.binds] == ["default/short-0"]


def test_the_nodes_that_free_soonest_are_reserved() -> None:
    # node0 holds work with no declared end, node1 work ending in 100 s, node2 work ending
    # in 50 s holding one GPU, node3 one GPU of work with no declared end.
    state = cluster(nodes=4, gpus=4)
    state.upsert_queue(queue("q", gpu_quota=16))
    add_job(state, "forever", "q", whole=2, priority=100, status=RUNNING, node="node0")
    soon = add_job(state, "soon", "q", whole=2, priority=100, status=RUNNING, node="node1")
    soon.expected_runtime = 100.0
    sooner = add_job(state, "sooner", "q", whole=1, priority=100, status=RUNNING,
                     node="node2")
    sooner.expected_runtime = 50.0
    add_job(state, "hold3", "q", whole=1, priority=100, status=RUNNING, node="node3")
    for key in ("default/soon-0", "default/sooner-0"):
        state.pods[key].started_at = NOW
    add_job(state, "gang", "q", pods=2, whole=4, created_at=NOW - 3600)
    result = run_cycle(state, RESERVE, NOW)
    assert result.reservations["default/gang"].nodes == ("node1", "node2")
    # Of the two nodes whose work has no declared end, the one holding fewer GPUs.
    add_job(state, "gang3", "q", pods=1, whole=4, created_at=NOW - 3000)
    result = run_cycle(state, RESERVE, NOW)
    assert result.reservations["default/gang3"].nodes == ("node3",)


def test_two_reservations_never_share_a_node() -> None:
    state = cluster(nodes=4, gpus=4)
    state.upsert_queue(queue("q", gpu_quota=16))
    for node in ("node0", "node2", "node3"):
        add_job(state, f"busy-{node}", "q", whole=1, priority=100, status=RUNNING,
                node=node)
    add_job(state, "gang", "q", pods=2, whole=4, created_at=NOW - 3600)
    add_job(state, "gang2", "q", pods=2, whole=4, created_at=NOW - 3000)
    result = run_cycle(state, RESERVE, NOW)
    assert {k: r.nodes for k, r in result.reservations.items()} == {
        "default/gang": ("node0", "node1"), "default/gang2": ("node2", "node3")}


def test_the_config_block_is_checked_naming_the_field() -> None:
    assert parse_config({"reservation": {"afterSeconds": 900}}).reservation_after == 900.0
    assert parse_config(None).reservation_after is None
    with pytest.raises(ScenarioError, match=r"config\.reservation\.afterSeconds"):
        parse_config({"reservation": {}})
    with pytest.raises(ScenarioError, match=r"afterSeconds"):
        parse_config({"reservation": {"afterSeconds": -5}})
    with pytest.raises(ScenarioError, match=r"config\.reservation"):
        parse_config({"reservation": {"after": 5}})


def test_an_elastic_gang_lets_go_once_its_gang_is_formed() -> None:
    # Three 4-GPU pods, two of them the gang: once two run, the third is a spare pod and
    # holds no nodes, though it still waits.
    state = cluster(nodes=2, gpus=4)
    state.upsert_queue(queue("q", gpu_quota=12))
    add_job(state, "busy", "q", whole=1, priority=100, status=RUNNING, node="node0")
    add_job(state, "gang", "q", pods=3, min_member=2, whole=4, created_at=NOW - 3600)
    assert run_cycle(state, RESERVE, NOW).reservations["default/gang"].nodes == (
        "node0", "node1")
    state.remove_pod("default/busy-0")
    result = run_cycle(state, RESERVE, NOW + 60)
    assert sorted(b.pod for b in result.binds) == ["default/gang-0", "default/gang-1"]
    assert state.has_pending_pods("default/gang")
    assert result.reservations == {} and state.reservations == {}
    assert run_cycle(state, RESERVE, NOW + 120).reservations == {}


def test_the_gangs_pending_reason_names_its_reserved_nodes() -> None:
    state = _starving()
    result = run_cycle(state, RESERVE, NOW)
    assert result.pending_reasons["default/gang"].endswith(
        "Node(s) node0, node1 are reserved for this job until it starts.")
    assert "reserved" not in run_cycle(_starving(), Config(actions=("allocate",)), NOW
                                       ).pending_reasons["default/gang"]
