"""Typed reads of raw API objects: a field of the wrong type reads as empty, never raises."""

from gpushare.api.objects import field_dict, field_list


def test_fields_of_the_right_type_are_returned_as_they_are():
    spec = {"ports": [1]}
    obj = {"spec": spec, "items": spec["ports"]}
    assert field_dict(obj, "spec") is spec
    assert field_list(obj, "items") is spec["ports"]


def test_missing_or_mistyped_fields_read_as_empty():
    for obj in ({}, {"spec": None}, {"spec": "x"}, {"spec": [1]}, {"spec": 7}):
        assert field_dict(obj, "spec") == {}
    for obj in ({}, {"ports": None}, {"ports": {"a": 1}}, {"ports": "80"}):
        assert field_list(obj, "ports") == []
