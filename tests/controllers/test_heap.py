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
    keeper = HeapKeeper(full_every=3)
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
