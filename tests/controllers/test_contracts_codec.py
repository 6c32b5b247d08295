"""The GPU binding codec: exact milli-GPUs through the annotation and back."""

import pytest

from gpushare.contracts import (
    GPU_INDICES_ANNOTATION,
    GPU_MEMORY_MIB_ANNOTATION,
    GPU_PORTION_ANNOTATION,
    BindingError,
    GpuBinding,
    format_portion_milli,
    parse_indices,
    parse_portion_milli,
)
from gpushare.controllers.translate import bound_gpus, format_portion


@pytest.mark.parametrize("milli", [0, 1, 5, 10, 250, 330, 333, 500, 999, 1000, 2000])
def test_every_milli_portion_round_trips_exactly(milli):
    assert parse_portion_milli(format_portion_milli(milli)) == milli


def test_portion_texts():
    assert [format_portion_milli(m) for m in (330, 5, 1000, 700, 0)] == [
        "0.33", "0.005", "1", "0.7", "0"]
    # The scheduler loop's formatter goes through the same codec.
    assert format_portion(0.33) == "0.33" and format_portion(1.0) == "1"


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
