"""The per-queue victim lists are kept on the state from cycle to cycle and refreshed job
by job; whatever changes between cycles, they must read exactly as lists made afresh."""

from __future__ import annotations

import dataclasses
import random

from scheduler_builders import add_job, cluster, queue

from gpushare.model import PodStatus
from gpushare.scheduler import Config
from gpushare.scheduler.actions.common.candidates import victim_lists
from gpushare.scheduler.cycle import open_session
from gpushare.scheduler.state import ClusterState, Kept

QUEUES = ("qa", "qb")


def _read(state: ClusterState) -> dict[str, tuple]:
    lists = victim_lists(open_session(state, Config(), 0.0))
    out = {}
    for name in QUEUES:
        leaf = lists.leaf(name)
        out[name] = None if leaf is None else (
            [key for key, _ in leaf.gpu], [key for key, _ in leaf.other],
            leaf.smallest, leaf.least, leaf.least_gpu,
        )
    return out


def _afresh(state: ClusterState) -> dict[str, tuple]:
    kept = state.kept
    state.kept = Kept()
    try:
        return _read(state)
    finally:
        state.kept = kept


def _change(state: ClusterState, rnd: random.Random, serial: list[int]) -> None:
    jobs = sorted(state.jobs)
    what = rnd.randrange(5)
    if what == 0 or not jobs:  # a new running job
        serial[0] += 1
        node = f"node{rnd.randrange(4)}"
        if state.usage[node].whole_gpus_free()[0]:
            add_job(state, f"n{serial[0]}", rnd.choice(QUEUES), whole=1, node=node,
                    status=PodStatus.RUNNING, priority=rnd.choice((10, 50, 100)),
                    created_at=float(serial[0]))
    elif what == 1:  # a job deleted
        state.remove_job(rnd.choice(jobs))
    elif what == 2:  # a job's priority or preemptibility changed, its pods as they were
        job = state.jobs[rnd.choice(jobs)]
        state.upsert_job(dataclasses.replace(
            job, priority=rnd.choice((10, 50, 100)), preemptible=rnd.random() < 0.7,
            pods=list(job.pods)))
    elif what == 3:  # a pod evicted for good
        pod = state.pods[state.jobs[rnd.choice(jobs)].pods[0]]
        if pod.node is not None:
            state.set_pod(pod, PodStatus.PENDING)
    else:  # a CPU-only job starts
        serial[0] += 1
        add_job(state, f"c{serial[0]}", rnd.choice(QUEUES), node=f"node{rnd.randrange(4)}",
                status=PodStatus.RUNNING, created_at=float(serial[0]))


def test_kept_lists_read_as_lists_made_afresh():
    for seed in range(20):
        rnd = random.Random(seed)
        state = cluster(nodes=4, gpus=4)
        state.upsert_queue(queue("qa", gpu_quota=1))
        state.upsert_queue(queue("qb", gpu_quota=1))
        serial = [0]
        for _ in range(6):
            _change(state, rnd, serial)
        for _ in range(8):  # cycles, with changes in between
            assert _read(state) == _afresh(state), f"seed {seed}"
            for _ in range(rnd.randrange(1, 4)):
                _change(state, rnd, serial)
