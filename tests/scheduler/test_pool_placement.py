"""Placement rules per node pool: a pod whose node selector names a pool is placed by
that pool's rules among that pool's nodes; the config names the field it cannot read."""

from __future__ import annotations

import pytest
from scheduler_builders import queue

from gpushare.model import GpuRequest, Job, Node, Pod
from gpushare.model.schema import ScenarioError
from gpushare.scheduler import Config, run_cycle
from gpushare.scheduler.config import NODE_POOL_LABEL
from gpushare.scheduler.config_file import parse_config
from gpushare.scheduler.state import ClusterState


def _cluster() -> ClusterState:
    state = ClusterState()
    for pool in ("train", "serve"):
        for i in range(3):
            state.upsert_node(Node(f"{pool}{i}", gpus=2, gpu_memory_mib=100,
                                   labels={NODE_POOL_LABEL: pool}))
    state.upsert_queue(queue("q", gpu_quota=-1))
    return state


def _fraction(state: ClusterState, name: str, pool: str, portion: int = 250) -> None:
    job = Job(name, "default", "q", min_member=1)
    state.upsert_job(job)
    state.upsert_pod(Pod(f"{name}-0", "default", job.key, 0, gpu=GpuRequest(portion=portion),
                         cpu_millis=100, memory_bytes=1024,
                         node_selector={NODE_POOL_LABEL: pool}))


def _placed(config: Config) -> dict[str, tuple[str, tuple[int, ...]]]:
    state = _cluster()
    # Interleaved, so each pool's index must hear of the other pool's placements in turn.
    for i in range(3):
        _fraction(state, f"t{i}", "train")
        _fraction(state, f"s{i}", "serve")
    binds = run_cycle(state, config, 0).binds
    return {b.pod.split("/")[1][:2]: (b.node, tuple(b.gpu_indices)) for b in binds}


def test_each_pool_places_by_its_own_rule():
    config = parse_config({"placement": {"gpu": "binpack"},
                           "nodePools": {"serve": {"placement": {"gpu": "spread"}}}},
                          ("allocate",))
    assert config.pool_placement == (("serve", "spread", "binpack"),)
    placed = _placed(config)
    # train (the cluster's binpack): all three on one GPU of one node.
    assert {placed[f"t{i}"] for i in range(3)} == {("train0", (0,))}
    # serve (spread): one node each.
    assert sorted(placed[f"s{i}"][0] for i in range(3)) == ["serve0", "serve1", "serve2"]
    # Without the pool entry, serve packs as train does.
    plain = _placed(Config(actions=("allocate",)))
    assert {plain[f"s{i}"] for i in range(3)} == {("serve0", (0,))}


def test_a_pool_may_use_a_fragmentation_rule():
    config = parse_config({"nodePools": {"train": {"placement": {"gpu": "fgd"}}}},
                          ("allocate",))
    assert config.placement_for(Pod("p", "d", "d/j", 0,
                                    node_selector={NODE_POOL_LABEL: "train"})) == (
        "fgd", "binpack")
    assert config.placement_for(Pod("p", "d", "d/j", 0)) == ("binpack", "binpack")
    placed = _placed(config)
    assert all(placed[f"t{i}"][0].startswith("train") for i in range(3))
    assert {placed[f"s{i}"] for i in range(3)} == {("serve0", (0,))}


def test_a_spread_pool_turns_consolidation_off():
    assert Config().placements() == (("binpack", "binpack"),)
    config = parse_config({"nodePools": {"serve": {"placement": {"gpu": "spread"}}}})
    assert config.placements() == (("binpack", "binpack"), ("spread", "binpack"))


@pytest.mark.parametrize(("raw", "path"), [
    ({"nodePools": {"serve": {"placement": {"gpu": "tight"}}}},
     r"config\.nodePools\.serve\.placement\.gpu"),
    ({"nodePools": {"serve": {"placment": {}}}}, r"config\.nodePools\.serve\.placment"),
    ({"nodePools": ["serve"]}, r"config\.nodePools"),
    ({"nodePools": {"": {}}}, r"config\.nodePools"),
])
def test_bad_pool_config_names_the_field(raw, path):
    with pytest.raises(ScenarioError, match=path):
        parse_config(raw)
