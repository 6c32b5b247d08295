"""Typed reads of raw API objects: a field of the wrong type reads as empty, never raises
(`field_dict`, `field_list`, and the `Meta` view of metadata)."""

from gpushare.api.objects import Meta, field_dict, field_list


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


def test_meta_reads_the_metadata_fields_it_names():
    obj = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "42",
                        "generation": 3, "creationTimestamp": "2026-01-02T03:04:05Z",
                        "deletionTimestamp": "2026-01-02T03:05:05Z",
                        "deletionGracePeriodSeconds": 0,
                        "finalizers": ["a/b", "c/d"], "labels": {"k": "v"},
                        "annotations": {"n": "m"},
                        "ownerReferences": [{"kind": "Job", "uid": "j"}]}}
    meta = Meta.of(obj)
    assert (meta.name, meta.namespace, meta.uid) == ("p", "ns", "u1")
    assert meta.resource_version == "42"
    assert meta.generation == 3
    assert meta.creation_timestamp == "2026-01-02T03:04:05Z"
    assert meta.deleting
    assert meta.deletion_grace_seconds == 0
    assert meta.finalizers == ["a/b", "c/d"]
    assert meta.labels == {"k": "v"} and meta.annotations == {"n": "m"}
    assert meta.owner_references == [{"kind": "Job", "uid": "j"}]
    assert meta.labels is obj["metadata"]["labels"]  # a view: writes reach the object


def test_meta_of_a_malformed_object_reads_as_empty():
    for obj in (None, {}, {"metadata": None}, {"metadata": "x"}, {"metadata": [1]},
                {"metadata": {"name": None, "resourceVersion": None, "generation": "3",
                              "finalizers": "a", "labels": ["k"], "ownerReferences": [1]}}):
        meta = Meta.of(obj)
        assert (meta.name, meta.namespace, meta.uid, meta.resource_version) == ("", "", "", "")
        assert (meta.creation_timestamp, meta.deleting) == ("", False)
        assert meta.generation == 0
        assert meta.deletion_grace_seconds is None
        assert (meta.finalizers, meta.labels, meta.annotations, meta.owner_references) == (
            [], {}, {}, [])
    assert Meta.of({"metadata": {"generation": True, "finalizers": ["a", 1]}}).generation == 0
    assert Meta.of({"metadata": {"finalizers": ["a", 1]}}).finalizers == ["a"]
