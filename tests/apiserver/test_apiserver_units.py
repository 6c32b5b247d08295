"""Pure parts: patches, selectors, printer-column JSONPath, ages."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from cryptography import x509
from hypothesis import given
from hypothesis import strategies as st

from gpushare.apiserver.auth.tls import ensure_certificates
from gpushare.apiserver.errors import ApiError
from gpushare.apiserver.http.tables import human_duration, jsonpath
from gpushare.apiserver.schema.patch import merge_patch, strategic_merge_patch
from gpushare.apiserver.schema.schemas import kind_schema
from gpushare.apiserver.storage.selectors import (
    fields_match,
    labels_match,
    parse_field_selector,
    parse_label_selector,
)

POD = {
    "metadata": {"name": "p", "labels": {"a": "1"}, "finalizers": ["x"]},
    "spec": {
        "containers": [
            {"name": "main", "image": "img:1", "env": [{"name": "A", "value": "1"},
                                                       {"name": "B", "value": "2"}]},
            {"name": "side", "image": "side:1"},
        ],
        "tolerations": [{"key": "k1"}],
    },
}


POD_SCHEMA = kind_schema("", "v1", "Pod")


def _smp(target: dict, patch: dict) -> dict:
    return strategic_merge_patch(target, patch, POD_SCHEMA)


def test_strategic_merge_merges_containers_and_env_by_name() -> None:
    patch = {"spec": {"containers": [{"name": "main", "env": [{"name": "B", "value": "3"},
                                                              {"name": "C", "value": "4"}]}]}}
    out = _smp(POD, patch)
    main = out["spec"]["containers"][0]
    assert main["image"] == "img:1"
    assert main["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "3"},
                           {"name": "C", "value": "4"}]
    assert out["spec"]["containers"][1]["name"] == "side"
    assert POD["spec"]["containers"][0]["env"][1]["value"] == "2"  # input untouched


def test_strategic_merge_directives() -> None:
    deleted = _smp(POD, {"spec": {"containers": [
        {"name": "side", "$patch": "delete"}]}})
    assert [c["name"] for c in deleted["spec"]["containers"]] == ["main"]
    replaced = _smp(POD, {"spec": {"containers": [
        {"name": "only", "image": "x"}, {"$patch": "replace"}]}})
    assert replaced["spec"]["containers"] == [{"name": "only", "image": "x"}]
    map_replace = _smp(POD, {"metadata": {"labels": {"$patch": "replace",
                                                                      "b": "2"}}})
    assert map_replace["metadata"]["labels"] == {"b": "2"}
    primitive = _smp(POD, {"metadata": {"$deleteFromPrimitiveList/finalizers":
                                                         ["x"]}})
    assert primitive["metadata"]["finalizers"] == []
    ordered = _smp(POD, {"spec": {"$setElementOrder/containers": [
        {"name": "side"}, {"name": "main"}]}})
    assert [c["name"] for c in ordered["spec"]["containers"]] == ["side", "main"]
    removed = _smp(POD, {"metadata": {"labels": {"a": None}}})
    assert removed["metadata"]["labels"] == {}
    lists_without_keys = _smp(POD, {"spec": {"tolerations": [{"key": "k2"}]}})
    assert lists_without_keys["spec"]["tolerations"] == [{"key": "k2"}]
    finalizers = _smp(POD, {"metadata": {"finalizers": ["y"]}})
    assert finalizers["metadata"]["finalizers"] == ["x", "y"]
    with pytest.raises(ApiError):
        strategic_merge_patch(POD, [], POD_SCHEMA)  # type: ignore[arg-type]


def test_merge_patch() -> None:
    out = merge_patch({"a": {"b": 1, "c": 2}, "l": [1, 2]}, {"a": {"b": None, "d": 3}, "l": [3]})
    assert out == {"a": {"c": 2, "d": 3}, "l": [3]}


@pytest.mark.parametrize(("selector", "labels", "expected"), [
    ("a=1", {"a": "1"}, True),
    ("a==1", {"a": "2"}, False),
    ("a!=1", {}, True),
    ("a in (1, 2),b", {"a": "2", "b": ""}, True),
    ("a notin (1)", {"a": "1"}, False),
    ("!a", {"b": "1"}, True),
    ("a,!b", {"a": "x", "b": "y"}, False),
])
def test_label_selector(selector: str, labels: dict[str, str], expected: bool) -> None:
    reqs = parse_label_selector(selector)
    assert labels_match(reqs, {"metadata": {"labels": labels}}) is expected


def test_field_selector_on_events() -> None:
    reqs = parse_field_selector("involvedObject.name=p,involvedObject.kind=Pod,type!=Warning",
                                "events")
    event = {"metadata": {"name": "e"}, "involvedObject": {"name": "p", "kind": "Pod"},
             "type": "Normal"}
    assert fields_match(reqs, event)
    assert not fields_match(reqs, {**event, "type": "Warning"})
    with pytest.raises(ApiError):
        parse_field_selector("spec.nodeName=x", "events")


def test_jsonpath_with_escaped_dots() -> None:
    obj = {"status": {"allocated": {"nvidia.com/gpu": "330m"}}, "spec": {"l": [{"a": 1}]}}
    assert jsonpath(obj, ".status.allocated.nvidia\\.com/gpu") == "330m"
    assert jsonpath(obj, ".spec.l[0].a") == 1
    assert jsonpath(obj, ".spec.missing.x") is None


@pytest.mark.parametrize(("seconds", "text"), [
    (5, "5s"), (119, "119s"), (150, "2m30s"), (600, "10m"), (4 * 3600 + 60, "4h1m"),
    (30 * 3600, "30h"), (3 * 86400 + 3600, "3d1h"), (40 * 86400, "40d"),
])
def test_human_duration(seconds: int, text: str) -> None:
    assert human_duration(seconds) == text


_scalars = st.one_of(st.integers(), st.text(max_size=5), st.booleans())
_keys = st.sampled_from(["a", "b", "c", "spec", "x"])
_values = st.recursive(st.one_of(_scalars, st.none()),
                       lambda inner: st.dictionaries(_keys, inner, max_size=4), max_leaves=12)
_objects = st.dictionaries(_keys, _values, max_size=5)


@given(_objects, _objects)
def test_strategic_merge_equals_merge_patch_without_lists(target: dict, patch: dict) -> None:
    # Without lists and directives, a strategic merge patch is a JSON merge patch.
    assert strategic_merge_patch(target, patch) == merge_patch(target, patch)


@given(_objects)
def test_empty_patches_change_nothing(target: dict) -> None:
    assert merge_patch(target, {}) == target
    assert strategic_merge_patch(target, {}) == target


def test_certificates_are_kept_and_reissued_for_new_hosts(tmp_path: Path) -> None:
    ca, cert, key = ensure_certificates(tmp_path, ["127.0.0.1"])
    first_ca, first_cert = ca.read_bytes(), cert.read_bytes()
    ensure_certificates(tmp_path, ["127.0.0.1"])
    assert cert.read_bytes() == first_cert  # reused
    ensure_certificates(tmp_path, ["10.1.2.3"])
    assert ca.read_bytes() == first_ca  # kubeconfigs stay valid
    issued = x509.load_pem_x509_certificate(cert.read_bytes())
    sans = issued.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert x509.IPAddress(ipaddress.ip_address("10.1.2.3")) in sans
    assert oct(key.stat().st_mode & 0o777) == "0o600"


def test_a_new_ca_gets_a_new_serving_certificate(tmp_path: Path) -> None:
    ca, cert, _key = ensure_certificates(tmp_path, ["127.0.0.1"])
    (tmp_path / "ca.key").unlink()  # e.g. a data directory from before the CA key was kept
    ensure_certificates(tmp_path, ["127.0.0.1"])
    issued = x509.load_pem_x509_certificate(cert.read_bytes())
    issued.verify_directly_issued_by(x509.load_pem_x509_certificate(ca.read_bytes()))


def test_field_sets_in_one_walk_equal_the_leaf_paths() -> None:
    from gpushare.apiserver.registry.builtin_kinds import default_object
    from gpushare.apiserver.schema import managed

    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "labels": {"a": "1"}, "finalizers": ["x", "y"],
                        "ownerReferences": [{"uid": "u", "name": "o", "kind": "Job",
                                             "apiVersion": "batch/v1"}]},
           "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}],
                                    "env": [{"name": "A", "value": "1"}]}],
                    "tolerations": [{"key": "k"}], "nodeSelector": {}}}
    default_object("pods", pod)
    leaves = managed.leaves(pod, POD_SCHEMA)
    tree = managed.fields_tree(pod, POD_SCHEMA)
    assert tree == managed.to_fields_v1(leaves)
    assert managed.from_fields_v1(tree) == set(leaves)
    containers = tree["f:spec"]["f:containers"]['k:{"name":"c"}']
    assert "." in containers and 'k:{"containerPort":80}' in containers["f:ports"]
    assert tree["f:spec"]["f:tolerations"] == {}  # atomic: owned as a whole
    assert tree["f:metadata"]["f:finalizers"] == {'v:"x"': {}, 'v:"y"': {}}


def test_managed_fields_read_back_from_the_cache_equal_a_fresh_parse() -> None:
    import orjson

    from gpushare.apiserver.schema import managed

    versions = [
        {"metadata": {"labels": {"a": "1"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
        {"metadata": {"labels": {"a": "1", "b": "2"}},
         "spec": {"containers": [{"name": "c", "image": "i"}], "nodeSelector": {}}},
        {"metadata": {"labels": {"b": "2"}},
         "spec": {"containers": [{"name": "c", "image": "j"}], "nodeSelector": {"x": "y"}}},
        {"metadata": {"labels": {"b": "3"}, "annotations": {"n": "1"}},
         "spec": {"containers": [{"name": "c", "image": "j"}]}},
        {"metadata": {"labels": {"b": "3"}, "annotations": {"n": "1"}},
         "spec": {"containers": [{"name": "c", "image": "k"}]}},
    ]
    managers = ["one", "two", "one", "three", "one"]
    cached: list | None = None  # each write's list, read back through the cache
    fresh: list | None = None  # the same list copied: parsed afresh every time
    old: dict | None = None
    for i, (new, manager) in enumerate(zip(versions, managers, strict=True)):
        time = f"2026-01-01T00:00:0{i}Z"
        got = managed.track_update(old, new, cached, POD_SCHEMA, manager, "v1", time, None)
        want = managed.track_update(old, new, orjson.loads(orjson.dumps(fresh)), POD_SCHEMA,
                                    manager, "v1", time, None)
        assert got == want
        assert got is not None
        # the cache is keyed by the list's identity: the copy is parsed, the list is not
        assert [vars_of(e) for e in managed.parse_entries(got)] == [
            vars_of(e) for e in managed.parse_entries(orjson.loads(orjson.dumps(got)))]
        if manager == "one" and i == 4:  # "three" is untouched: its entry is reused
            assert next(e for e in got if e["manager"] == "three") is next(
                e for e in cached or [] if e["manager"] == "three")
        cached, fresh, old = got, want, new
    owners = {e["manager"]: e["fieldsV1"] for e in cached or []}
    assert set(owners) == {"one", "three"}  # "two"'s label and selector were taken, gone
    assert "f:a'" not in str(owners)  # the removed label a went from its owner
    assert owners["three"]["f:metadata"]["f:labels"] == {"f:b": {}}


def vars_of(entry) -> tuple:
    return (entry.manager, entry.operation, entry.api_version, entry.time, set(entry.fields),
            entry.subresource)


def test_a_write_is_checked_where_it_differs_from_the_stored_object() -> None:
    from gpushare.apiserver.schema import fieldvalidation, typecheck

    stored = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
              "spec": {"containers": [{"name": "c", "image": "i"}],
                       "terminationGracePeriodSeconds": 30, "priority": 1}}
    # `true` equals 1 in Python but not in JSON: the changed type is still found
    written = {**stored, "spec": {**stored["spec"], "priority": True}}
    assert typecheck.mismatches(written, POD_SCHEMA, stored=stored) == [
        "spec.priority: expected integer, got boolean"]
    # a field written as stored is not checked again (it was when it was stored)...
    odd = {**stored, "spec": {**stored["spec"], "terminationGracePeriodSeconds": "x"}}
    assert typecheck.mismatches(odd, POD_SCHEMA, stored=odd) == []
    # ...while a write that changes it is
    assert typecheck.mismatches(odd, POD_SCHEMA, stored=stored) == [
        "spec.terminationGracePeriodSeconds: expected integer, got string"]
    assert typecheck.mismatches(odd, POD_SCHEMA) == [
        "spec.terminationGracePeriodSeconds: expected integer, got string"]
    # unknown fields are dropped wherever the write differs, deep under unchanged levels too
    unknown = {**stored, "spec": {**stored["spec"],
                                  "containers": [{"name": "c", "image": "i", "typo": 1}]},
               "extra": 1}
    assert fieldvalidation.prune_builtin(unknown, POD_SCHEMA, stored) == [
        "extra", "spec.containers[0].typo"]
    assert unknown["spec"]["containers"] == [{"name": "c", "image": "i"}]
    assert "extra" not in unknown


def test_fields_left_as_stored_change_no_ownership() -> None:
    from gpushare.apiserver.schema import managed

    old = {"metadata": {"labels": {"a": "1"}, "finalizers": [1]},
           "spec": {"containers": [{"name": "c", "image": "i"}], "priority": 1}}
    for new in (
        {**old, "metadata": {"labels": {"a": "2"}, "finalizers": [1]}},
        {**old, "metadata": {"labels": {"a": "1"}, "finalizers": [True]}},  # 1 is not true
        {**old, "spec": {**old["spec"], "priority": True}},
        {**old, "spec": {"containers": [{"name": "c", "image": "j"}], "priority": 1}},
    ):
        full_old, full_new = managed.leaves(old, POD_SCHEMA), managed.leaves(new, POD_SCHEMA)
        same = managed._same_sections(old, new)
        part_old = managed.leaves(old, POD_SCHEMA, None, same)
        part_new = managed.leaves(new, POD_SCHEMA, None, same)

        def diff(a: dict, b: dict) -> tuple[set, set]:
            return ({p for p, v in b.items() if p not in a or a[p] != v}, a.keys() - b.keys())

        assert diff(part_old, part_new) == diff(full_old, full_new)
        assert same  # something was left out of the walk
