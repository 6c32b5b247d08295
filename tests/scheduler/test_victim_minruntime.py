"""Min-runtime protection: inheritance and the lowest-common-ancestor resolution."""

from __future__ import annotations

from gpushare.model import Queue
from gpushare.scheduler.plugins.minruntime import (
    is_protected,
    preempt_min_runtime,
    reclaim_min_runtime,
)


def _queues(*qs: Queue) -> dict[str, Queue]:
    return {q.name: q for q in qs}


def test_preempt_min_runtime_is_inherited_from_the_nearest_ancestor():
    qs = _queues(
        Queue("root", preempt_min_runtime=600),
        Queue("dept", parent="root"),
        Queue("leaf", parent="dept"),
        Queue("own", parent="dept", preempt_min_runtime=60),
    )
    assert preempt_min_runtime(qs, "leaf") == 600
    assert preempt_min_runtime(qs, "own") == 60


def test_reclaim_min_runtime_starts_at_the_child_of_the_common_ancestor():
    qs = _queues(
        Queue("root", reclaim_min_runtime=900),
        Queue("d1", parent="root", reclaim_min_runtime=300),
        Queue("d2", parent="root"),
        Queue("a", parent="d1"),
        Queue("b", parent="d1", reclaim_min_runtime=30),
        Queue("c", parent="d2"),
    )
    # a vs b split under d1: b's own value counts.
    assert reclaim_min_runtime(qs, "a", "b") == 30
    # c reclaiming from b: they split at root, so d1 (b's side) decides, not b.
    assert reclaim_min_runtime(qs, "c", "b") == 300
    # a reclaiming from c: d2 sets nothing, so root's value is inherited.
    assert reclaim_min_runtime(qs, "a", "c") == 900


def test_different_top_level_queues_use_the_victims_top_level_queue():
    qs = _queues(
        Queue("x", reclaim_min_runtime=120),
        Queue("y"),
        Queue("xl", parent="x", reclaim_min_runtime=5),
    )
    assert reclaim_min_runtime(qs, "y", "xl") == 120


def test_protection_window():
    assert is_protected(30, 60)
    assert not is_protected(60, 60)
    assert not is_protected(30, 0)
