"""Admission of a Queue's per-GPU-type figures (``spec.resources.gpu.types``): bad input is
refused with the field named."""

from __future__ import annotations

import pytest

from gpushare.apiserver.schema.validation import validate_queue


def _queue(gpu: dict) -> dict:
    return {"metadata": {"name": "q"}, "spec": {"resources": {"gpu": gpu}}}


def _fields(gpu: dict) -> list[tuple[str, str]]:
    return [(c.field, c.message) for c in validate_queue(_queue(gpu), lambda name: None)]


def test_good_types_pass():
    assert _fields({"quota": 4, "types": {"H100": {"quota": 2, "limit": 4},
                                          "L40S": {"quota": -1, "overQuotaWeight": 0}}}) == []


@pytest.mark.parametrize(("entry", "field", "text"), [
    ({"quota": -3}, "spec.resources.gpu.types.H100.quota", "must be -1 (unlimited) or at least 0"),
    ({"limit": -0.5}, "spec.resources.gpu.types.H100.limit", "must be -1 (unlimited) or at"),
    ({"quota": 4, "limit": 2}, "spec.resources.gpu.types.H100.limit", "may not be below quota"),
    ({"overQuotaWeight": -1}, "spec.resources.gpu.types.H100.overQuotaWeight", "at least 0"),
    ({"quota": "lots"}, "spec.resources.gpu.types.H100.quota", "must be a number"),
])
def test_bad_type_entry_names_its_field(entry, field, text):
    causes = _fields({"types": {"H100": entry}})
    assert len(causes) == 1 and causes[0][0] == field and text in causes[0][1], causes


def test_types_must_be_an_object_of_objects():
    assert _fields({"types": [1]})[0][0] == "spec.resources.gpu.types"
    assert _fields({"types": {"H100": 3}})[0][0] == "spec.resources.gpu.types.H100"


def test_only_gpu_has_types():
    causes = validate_queue({"metadata": {"name": "q"}, "spec": {"resources": {
        "cpu": {"types": {"H100": {"quota": 1}}}}}}, lambda name: None)
    assert [c.field for c in causes] == ["spec.resources.cpu.types"]
