"""The scheduler loop's heap keeping: survivors frozen between cycles, a full pass now
and then that reclaims garbage caught in reference cycles after it was frozen."""

from __future__ import annotations

import gc
import weakref

import pytest

from gpushare.controllers.scheduling.heap import HeapKeeper


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle_pair() -> tuple[_Node, weakref.ref]:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return a, weakref.ref(a)


@pytest.fixture(autouse=True)
def _unfrozen():
    yield
    gc.unfreeze()


def test_survivors_are_frozen_between_cycles():
    keeper = HeapKeeper(full_every=10)
    kept = [_Node() for _ in range(100)]
    keeper.between_cycles()
    assert gc.get_freeze_count() >= len(kept)


def test_garbage_frozen_in_a_reference_cycle_goes_at_the_full_pass():
    keeper = HeapKeeper(full_every=3, min_allocated=0, min_interval=0)
    keeper.between_cycles()  # cycle 1
    # The pair is alive through a freeze, then dropped: only a full pass can free it.
    alive, pair = _cycle_pair()
    keeper.between_cycles()  # cycle 2: the pair is frozen
    del alive
    gc.collect()
    assert pair() is not None  # frozen: the ordinary collection does not see it
    keeper.between_cycles()  # cycle 3: the full pass
    assert pair() is None


def test_full_every_must_be_positive():
    with pytest.raises(ValueError, match="full_every"):
        HeapKeeper(full_every=0)
    with pytest.raises(ValueError, match="min_allocated"):
        HeapKeeper(min_allocated=-1)


def test_small_cycles_skip_the_collection_until_enough_was_allocated():
    keeper = HeapKeeper(full_every=1000, min_allocated=5_000, min_interval=0)
    keeper.between_cycles()  # the first cycle always collects
    assert keeper.collections == 1
    small = [_Node() for _ in range(10)]
    keeper.between_cycles()
    assert keeper.collections == 1  # ten objects: not worth a pass
    frozen = gc.get_freeze_count()
    big = [_Node() for _ in range(20_000)]
    keeper.between_cycles()
    assert keeper.collections == 2
    assert gc.get_freeze_count() >= frozen + len(big) + len(small)


def test_collections_are_at_least_min_interval_apart():
    now = [100.0]
    keeper = HeapKeeper(full_every=1000, min_allocated=0, min_interval=1.0,
                        clock=lambda: now[0])
    keeper.between_cycles()
    now[0] += 0.5
    keeper.between_cycles()
    assert keeper.collections == 1  # half a second after the last one
    now[0] += 0.6
    keeper.between_cycles()
    assert keeper.collections == 2


def test_the_full_pass_is_not_skipped_when_due():
    keeper = HeapKeeper(full_every=2, min_allocated=10**9)
    keeper.between_cycles()  # cycle 1: the first collection
    alive, pair = _cycle_pair()
    gc.freeze()
    del alive
    keeper.between_cycles()  # cycle 2: little allocated, but the full pass is due
    assert keeper.collections == 2
    assert pair() is None
