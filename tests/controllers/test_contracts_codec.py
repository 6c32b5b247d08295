"""The GPU binding codec: exact milli-GPUs through the annotation and back."""

import pytest

from gpushare.agent.gpu.gpu_share import share_from_annotations
from gpushare.api.contracts import (
    GPU_INDICES_ANNOTATION,
    GPU_MEMORY_MIB_ANNOTATION,
    GPU_PORTION_ANNOTATION,
    BindingError,
    GpuBinding,
    format_portion_milli,
    parse_indices,
    parse_portion_milli,
)
from gpushare.api.gpu import bound_gpus
from gpushare.model.gpu_inventory import GpuDevice, GpuInventory


@pytest.mark.parametrize("milli", [0, 1, 5, 10, 250, 330, 333, 500, 999, 1000, 2000])
def test_every_milli_portion_round_trips_exactly(milli):
    assert parse_portion_milli(format_portion_milli(milli)) == milli


def test_portion_texts():
    assert [format_portion_milli(m) for m in (330, 5, 1000, 700, 0)] == [
        "0.33", "0.005", "1", "0.7", "0"]


@pytest.mark.parametrize("text", ["0.3333", "-0.5", "abc", "nan", "inf"])
def test_bad_portions_name_the_annotation(text):
    with pytest.raises(BindingError, match=GPU_PORTION_ANNOTATION):
        parse_portion_milli(text)


def test_binding_annotations_read_back_by_translate():
    binding = GpuBinding((2, 3), 330, 26880)
    annotations = binding.annotations()
    assert annotations == {GPU_INDICES_ANNOTATION: "2,3", GPU_PORTION_ANNOTATION: "0.33",
                           GPU_MEMORY_MIB_ANNOTATION: "26880"}
    pod = {"metadata": {"annotations": annotations}}
    assert bound_gpus(pod) == ((2, 3), 330)
    assert parse_indices("") == ()
    with pytest.raises(BindingError, match=GPU_INDICES_ANNOTATION):
        parse_indices("0,x")


def test_the_agent_reads_every_portion_the_scheduler_can_write_exactly():
    """Scheduler loop -> annotations -> agent, for every milli-GPU a share can be: the
    agent gets the same integer back, its memory share is exact integer arithmetic."""
    inventory = GpuInventory((GpuDevice(0, "GPU-0", "NVIDIA-H100", 81559, 132),
                              GpuDevice(1, "GPU-1", "NVIDIA-H100", 81559, 132)), declared=True)
    for milli in range(1, 1001):
        annotations = GpuBinding((1,), milli).annotations()
        assert bound_gpus({"metadata": {"annotations": annotations}}) == ((1,), milli)
        share = share_from_annotations(annotations, inventory)
        assert share is not None and share.portion_milli == milli
        assert share.memory_mib == 81559 * milli // 1000


def test_the_agent_refuses_portions_that_are_not_milli_gpus():
    from gpushare.agent.gpu.gpu_share import GpuAssignmentError

    inventory = GpuInventory((GpuDevice(0, "GPU-0", "NVIDIA-H100", 81559, 132),), declared=True)
    for text in ("0.3333", "1.5", "0", "x"):
        with pytest.raises(GpuAssignmentError, match=GPU_PORTION_ANNOTATION):
            share_from_annotations({GPU_INDICES_ANNOTATION: "0",
                                    GPU_PORTION_ANNOTATION: text}, inventory)
