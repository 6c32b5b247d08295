"""FGD's fragmentation figure on hand-computed cases, and the task mix."""

import pytest

from gpushare.scheduler.fragmentation import TaskMix, TaskShape, node_fragmentation

WHOLE = TaskShape(cpu=1000, gpus=1, milli=1000)
THIRD = TaskShape(cpu=1000, gpus=1, milli=300)
CPU_ONLY = TaskShape(cpu=1000)
MIX = TaskMix(((WHOLE, 0.5), (THIRD, 0.25), (CPU_ONLY, 0.25)))


def test_gpus_too_small_for_a_shape_are_its_fragment():
    # free 1000, 500, 200, 0 = 1700.  WHOLE: 500 + 200 unusable -> 0.5 * 700 = 350;
    # THIRD: 200 unusable -> 0.25 * 200 = 50; CPU_ONLY uses no GPU -> 0.25 * 1700 = 425.
    assert node_fragmentation(MIX, "T4", 10_000, 0, (1000, 500, 200, 0)) == pytest.approx(825)


def test_a_shape_the_node_cannot_host_sees_all_free_gpu_as_fragment():
    # Too little CPU for WHOLE and THIRD: everything is a fragment for every shape.
    assert node_fragmentation(MIX, "T4", 500, 0, (1000, 500, 200, 0)) == pytest.approx(1700)
    # Two GPUs needed, only one has room: 0.5 * 1200 for it; THIRD: 0.25 * 0; CPU 0.25 * 1200.
    two = TaskMix(((TaskShape(1000, 2, 1000), 0.5), (THIRD, 0.25), (CPU_ONLY, 0.25)))
    assert node_fragmentation(two, "T4", 10_000, 0, (1000, 200)) == pytest.approx(
        0.5 * 1200 + 0.25 * 200 + 0.25 * 1200)


def test_gpu_model_constraints():
    t4_only = TaskMix(((TaskShape(0, 1, 500, 0, frozenset({"T4"})), 1.0),))
    assert node_fragmentation(t4_only, "A10", 10_000, 0, (1000, 1000)) == 2000
    assert node_fragmentation(t4_only, "T4", 10_000, 0, (1000, 300)) == 300


def test_full_node_has_no_fragment():
    assert node_fragmentation(MIX, "T4", 0, 0, (0, 0)) == 0


def test_memory_counts_only_when_asked():
    shape = TaskShape(cpu=0, gpus=1, milli=500, memory=10)
    assert node_fragmentation(TaskMix(((shape, 1.0),)), "T4", 0, 5, (1000,)) == 0
    assert node_fragmentation(TaskMix(((shape, 1.0),), True), "T4", 0, 5, (1000,)) == 1000


def test_mix_keeps_the_most_common_shapes_and_renormalises():
    shapes = [WHOLE] * 60 + [THIRD] * 30 + [CPU_ONLY] * 10
    mix = TaskMix.of(shapes)
    assert mix.shapes == ((WHOLE, 0.6), (THIRD, 0.3), (CPU_ONLY, 0.1))
    # 30 shapes, one task each, plus one shape of 70: the top 10 cover 79 % (< 95 %), the
    # top 20 cover 89 %, the top 30 cover 99 %: 30 shapes kept, renormalised over 99 tasks.
    many = [TaskShape(cpu=i) for i in range(30)] + [WHOLE] * 70
    kept = TaskMix.of(many)
    assert len(kept.shapes) == 30 and kept.shapes[0] == (WHOLE, pytest.approx(70 / 99))
    assert sum(p for _, p in kept.shapes) == pytest.approx(1)
