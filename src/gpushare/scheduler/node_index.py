"""An index of nodes by what they can still take, kept up to date from the state's dirty
set, so that choosing a node costs a walk over the few candidates in score order rather
than a pass over every node.

Buckets hold node keys in placement order (the strategy's ``index_key``, see
``nodeplacement``: binpack least free first, spread largest free ratio first; then name):

* ``whole[b]``: ready nodes with exactly ``b`` GPUs that are (or will be, once releases
  finish) entirely free;
* ``shared[k]``: ready nodes whose roomiest shared GPU has ``k`` hundred milli-GPUs free;
* ``cpu_only`` / ``cpu_gpu``: ready nodes without / with GPUs, by CPU.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable, Iterator
from typing import Any

from gpushare.model.quantities import MILLI
from gpushare.scheduler.nodeplacement import PlacementStrategy
from gpushare.scheduler.placement_registry import placement_strategy
from gpushare.scheduler.state import ClusterState, NodeUsage

Key = tuple[Any, ...]


class NodeIndex:
    def __init__(self, state: ClusterState, gpu_strategy: str, cpu_strategy: str) -> None:
        self.state = state
        self.gpu_strategy = gpu_strategy
        self.cpu_strategy = cpu_strategy
        self.gpu_rule: PlacementStrategy = placement_strategy(gpu_strategy)
        self.cpu_rule: PlacementStrategy = placement_strategy(cpu_strategy)
        self.whole: dict[int, list[Key]] = {}
        self.shared: dict[int, list[Key]] = {}
        self.cpu_only: list[Key] = []
        self.cpu_gpu: list[Key] = []
        self._entries: dict[str, list[tuple[list[Key], Key]]] = {}
        self.node_version = state.node_version
        #: Nodes changed since this index last looked (the state's dirty set, handed on).
        self.pending: set[str] = set()
        for name in sorted(state.usage):
            self._add(name)

    @classmethod
    def of(cls, state: ClusterState, gpu_strategy: str, cpu_strategy: str) -> NodeIndex:
        """The state's index for this pair of strategies, up to date. One index per pair
        in use (node pools may place by different rules); each hears of every change."""
        indexes = state.kept.of(NodeIndexes)
        _hand_on(state, indexes)
        index = indexes.get((gpu_strategy, cpu_strategy))
        if index is None:
            index = indexes[(gpu_strategy, cpu_strategy)] = cls(state, gpu_strategy,
                                                                cpu_strategy)
        else:
            index.refresh()
        return index

    def refresh(self) -> None:
        dirty = self.pending
        if not dirty:
            return
        for name in sorted(dirty):
            self._remove(name)
            if name in self.state.usage:
                self._add(name)
        dirty.clear()

    # ------------------------------------------------------------------ keys
    def gpu_key(self, u: NodeUsage) -> Key:
        return self.gpu_rule.index_key(u.gpus_free_future_milli(), u.node.gpus * MILLI,
                                       u.node.name)

    def cpu_key(self, u: NodeUsage) -> Key:
        return self.cpu_rule.index_key(u.cpu_free_future(), u.node.cpu_millis, u.node.name)

    # ----------------------------------------------------------- maintenance
    def _insert(self, name: str, target: list[Key], key: Key) -> None:
        bisect.insort(target, key)
        self._entries.setdefault(name, []).append((target, key))

    def _remove(self, name: str) -> None:
        for target, key in self._entries.pop(name, ()):
            i = bisect.bisect_left(target, key)
            if i < len(target) and target[i] == key:
                del target[i]

    def _add(self, name: str) -> None:
        u = self.state.usage[name]
        if not u.node.ready:
            return
        if u.node.gpus:
            key = self.gpu_key(u)
            whole = 0
            roomiest = -1
            for i in range(u.node.gpus):
                future = u.gpu_free_future(i)
                if future == MILLI:
                    whole += 1
                if u.gpu_shared[i] > 0 and future > roomiest:
                    roomiest = future
            if whole:
                self._insert(name, self.whole.setdefault(whole, []), key)
            if roomiest > 0:
                self._insert(name, self.shared.setdefault(min(roomiest // 100, 9), []), key)
            self._insert(name, self.cpu_gpu, self.cpu_key(u))
        else:
            self._insert(name, self.cpu_only, self.cpu_key(u))

    # --------------------------------------------------------------- queries
    def whole_candidates(self, at_least: int) -> Iterator[str]:
        """Nodes with at least this many entirely free GPUs, in GPU placement order."""
        return (key[-1] for key in self.whole_candidate_keys(at_least))

    def whole_candidate_keys(self, at_least: int) -> Iterable[Key]:
        """The index keys (``gpu_key``, name last) of ``whole_candidates``, in order."""
        return _merge([keys for b, keys in self.whole.items() if b >= at_least and keys])

    def shared_candidates(self, portion: int) -> Iterator[str]:
        """Nodes whose roomiest shared GPU may hold this portion, in GPU placement order."""
        return (key[-1] for key in self.shared_candidate_keys(portion))

    def shared_candidate_keys(self, portion: int) -> Iterable[Key]:
        """The index keys (``gpu_key``, name last) of ``shared_candidates``, in order."""
        return _merge([keys for k, keys in self.shared.items()
                       if (k + 1) * 100 > portion and keys])

    def cpu_candidates(self, gpu_nodes: bool, cpu: int) -> Iterator[str]:
        keys = self.cpu_gpu if gpu_nodes else self.cpu_only
        bound = self.cpu_rule.index_start(cpu)
        start = 0 if bound is None else bisect.bisect_left(keys, bound)
        return (keys[i][-1] for i in range(start, len(keys)))


def _hand_on(state: ClusterState, indexes: dict[tuple[str, str], NodeIndex]) -> None:
    """Move the state's dirty nodes into every index's own pending set."""
    dirty = state.dirty_nodes
    if dirty:
        for index in indexes.values():
            index.pending |= dirty
        dirty.clear()


def _merge(lists: list[list[Key]]) -> Iterable[Key]:
    if len(lists) == 1:
        return iter(lists[0])
    return heapq.merge(*lists)


class NodeIndexes(dict[tuple[str, str], NodeIndex]):
    """The state's node indexes, one per pair of (GPU, CPU) placement rules in use (kept
    on the state for later cycles: ``state.kept.of(NodeIndexes)``)."""
