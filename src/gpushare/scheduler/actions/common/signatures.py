"""Scheduling signatures: once a job failed to find victims, a later job of the same
shape that is not easier (no fewer pods, none of them smaller) is skipped."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from gpushare.model import Pod

Size = tuple[int, int, int, int, int]


def pod_size(pod: Pod) -> Size:
    g = pod.gpu
    return (g.whole, g.portion * g.devices, g.memory_mib * g.devices, pod.cpu_millis,
            pod.memory_bytes)


def _sorted_sizes(pods: Sequence[Pod]) -> list[Size]:
    return sorted(pod_size(p) for p in pods)


def _no_smaller(candidate: list[Size], failed: list[Size]) -> bool:
    """Each of the failed job's pods is matched by a candidate pod at least as large."""
    if len(candidate) < len(failed):
        return False
    # Both sorted ascending: compare the largest len(failed) candidate pods pairwise.
    tail = candidate[len(candidate) - len(failed):]
    pairs = zip(tail, failed, strict=True)
    return all(all(c >= f for c, f in zip(cs, fs, strict=True)) for cs, fs in pairs)


@dataclass(slots=True)
class FailedJobs:
    """The smallest failed steps seen so far, per shape."""

    by_shape: dict[Hashable, list[list[Size]]] = field(default_factory=dict)

    def not_easier(self, shape: Hashable, step: Sequence[Pod]) -> bool:
        sizes = _sorted_sizes(step)
        return any(_no_smaller(sizes, f) for f in self.by_shape.get(shape, ()))

    def add(self, shape: Hashable, step: Sequence[Pod]) -> None:
        sizes = _sorted_sizes(step)
        kept = [f for f in self.by_shape.get(shape, []) if not _no_smaller(f, sizes)]
        kept.append(sizes)
        self.by_shape[shape] = kept
