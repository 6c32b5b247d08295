"""FGD's fragmentation figure and the ``fragmentation`` rule's CPU-aware figure, room waste
and cores per GPU on hand-computed cases, and the task mix."""

import pytest

from gpushare.scheduler.fragmentation import (
    FEED_CORES,
    TaskMix,
    TaskShape,
    cores_per_gpu,
    cpu_aware_fragmentation,
    node_fragmentation,
    room_waste,
)

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


# ------------------------------------------------------ the fragmentation rule's figures
EIGHT_CORES = TaskShape(cpu=8000, gpus=1, milli=1000)


def test_cpu_aware_figure_counts_gpus_the_cpu_cannot_feed():
    assert FEED_CORES == 4000
    mix = TaskMix(((EIGHT_CORES, 1.0),))
    four = (1000, 1000, 1000, 1000)
    # 16 cores: the task's 8, then 4 for each further GPU: 3 of the 4 GPUs are usable.
    assert cpu_aware_fragmentation(mix, "T4", 16_000, 0, four) == pytest.approx(1000)
    assert node_fragmentation(mix, "T4", 16_000, 0, four) == 0  # FGD sees one task only
    assert cpu_aware_fragmentation(mix, "T4", 8_000, 0, four) == pytest.approx(3000)
    assert cpu_aware_fragmentation(mix, "T4", 20_000, 0, four) == 0
    assert cpu_aware_fragmentation(mix, "T4", 7_000, 0, four) == pytest.approx(4000)


def test_cpu_aware_figure_for_multi_gpu_and_cpu_free_tasks():
    pair = TaskMix(((TaskShape(cpu=8000, gpus=2, milli=1000), 1.0),))
    four = (1000, 1000, 1000, 1000)
    assert cpu_aware_fragmentation(pair, "T4", 8_000, 0, four) == pytest.approx(2000)
    assert cpu_aware_fragmentation(pair, "T4", 12_000, 0, four) == 0
    no_cpu = TaskMix(((TaskShape(cpu=0, gpus=1, milli=500), 1.0),))
    assert cpu_aware_fragmentation(no_cpu, "T4", 0, 0, (1000, 300)) == pytest.approx(300)
    # Otherwise it is FGD's figure: the mixed cases above agree.
    for cpu in (500, 10_000):
        assert cpu_aware_fragmentation(MIX, "T4", cpu, 0, (1000, 500, 200, 0)) == (
            pytest.approx(node_fragmentation(MIX, "T4", cpu, 0, (1000, 500, 200, 0))))


def test_room_waste_of_a_two_shape_mix():
    mix = TaskMix(((TaskShape(0, 1, 300), 0.5), (TaskShape(0, 1, 400), 0.5)))
    w = room_waste(mix)
    assert len(w) == 1001
    assert w[299] == 299 and w[300] == 0 and w[350] == 50
    assert w[400] == pytest.approx(50)  # half the time a 300 takes it, half a 400
    assert w[600] == pytest.approx(100)  # 300 -> 0, or 400 -> 200
    assert w[700] == pytest.approx(25)
    assert w[1000] == pytest.approx(62.5)  # 0.5 * w[700] + 0.5 * w[600]


def test_a_room_few_tasks_fit_fills_in_proportion():
    mix = TaskMix(((TaskShape(0, 1, 100), 0.01), (TaskShape(0, 1, 1000), 0.99)))
    w = room_waste(mix)
    # 150 milli: only the 1 % of 100-milli tasks fit, a fifth of the 5 % that fill a room.
    assert w[150] == pytest.approx(0.8 * 150 + 0.2 * 50)
    assert w[1000] == pytest.approx(0.99 * 0 + 0.01 * w[900])


def test_cores_per_gpu_counts_gpu_tasks_only():
    mix = TaskMix(((TaskShape(4000, 1, 500), 0.25), (TaskShape(8000, 1, 1000), 0.25),
                   (TaskShape(32_000), 0.5)))
    assert cores_per_gpu(mix) == pytest.approx(6000 / 0.75)
    assert cores_per_gpu(TaskMix(((TaskShape(32_000), 1.0),))) == 0
