from fractions import Fraction

import pytest
import yaml

from gpushare.model import PodStatus
from gpushare.simulator import ScenarioError, build_state, parse, run

BASE = """
format: 1
name: small
actions: [allocate]
nodes:
  - {name: node0, gpus: 2, gpuMemoryMiB: 100}
queues:
  - name: q
    resources: {gpu: {quota: 2, limit: -1, overQuotaWeight: 1}}
jobs:
  - name: j
    queue: q
    resources: {gpus: 0.5}
    tasks:
      - {name: a, state: Running, node: node0, gpuGroups: [g0]}
      - {name: b, state: Pending}
expect:
  tasks:
    b: {status: Binding, node: node0, gpus: 0.5}
"""


def load(text=BASE, **edit):
    data = yaml.safe_load(text)
    for path, value in edit.items():
        target = data
        keys = path.split("/")
        for key in keys[:-1]:
            target = target[int(key)] if key.isdigit() else target[key]
        target[keys[-1]] = value
    return parse(data, "test.yaml")


def test_valid_scenario_runs_and_passes():
    result = run(load())
    assert result.passed, result.mismatches
    assert result.snapshot.tasks["b"]["gpuGroups"] == ["g0"]


def test_unknown_key_names_its_path():
    with pytest.raises(ScenarioError, match=r"^jobs\[0\]\.tasks\[0\]\.stat: unknown key"):
        data = yaml.safe_load(BASE)
        data["jobs"][0]["tasks"][0]["stat"] = "Running"
        parse(data)


def test_x_keys_are_ignored_everywhere():
    data = yaml.safe_load(BASE)
    data["x-note"] = 1
    data["jobs"][0]["x-why"] = "because"
    data["jobs"][0]["tasks"][1]["x-more"] = {"a": 1}
    assert run(parse(data)).passed


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("jobs/0/tasks/1/state", "Sleeping", r"jobs\[0\]\.tasks\[1\]\.state: expected one of"),
        ("nodes/0/gpus", "two", r"nodes\[0\]\.gpus: expected an integer"),
        ("queues/0/resources/gpu/quota", -3, r"queues\[0\]\.resources\.gpu\.quota: must be"),
        ("jobs/0/queue", "nope", r"jobs\[0\]\.queue: unknown queue"),
        ("jobs/0/tasks/0/node", "ghost", r"jobs\[0\]\.tasks\[0\]\.node: unknown node"),
        ("config", {"placement": {"gpu": "scatter"}}, r"config\.placement\.gpu: expected one of"),
        ("actions", ["allocate", "dance"], r"actions\[1\]: expected one of"),
    ],
)
def test_bad_values_name_their_path(path, value, message):
    with pytest.raises(ScenarioError, match=message):
        load(**{path: value})


def test_running_pod_needs_a_node():
    data = yaml.safe_load(BASE)
    del data["jobs"][0]["tasks"][0]["node"]
    with pytest.raises(ScenarioError, match=r"jobs\[0\]\.tasks\[0\]\.node: required"):
        parse(data)


def test_defaults_apply_and_groups_map_to_gpus():
    sc = load()
    state = build_state(sc)
    a = state.pods["default/a"]
    assert a.status is PodStatus.RUNNING and a.gpu_indices == (0,) and a.portion == 500
    assert sc.jobs[0].min_member == 2 and sc.jobs[0].priority == 50 and sc.jobs[0].preemptible


def test_mismatch_is_reported():
    result = run(load(**{"expect": {"tasks": {"b": {"status": "Pending"}}}}))
    assert not result.passed
    assert result.mismatches == ["after cycle 1: task b: status is Binding, expected Pending"]


def test_stable_cycles_apply_settling():
    data = yaml.safe_load(BASE)
    data["stableCycles"] = 2
    data["expect"] = {"tasks": {"b": {"status": "Binding"}}}
    result = run(parse(data))
    # After settling, b is Running: the expectation no longer holds in the stable cycles.
    assert [m.split(":")[0] for m in result.mismatches] == [
        "after stable cycle 1", "after stable cycle 2"
    ]


def test_reservation_keys_are_read_and_bad_values_name_their_path():
    sc = load(**{"jobs/0/expectedRuntimeSeconds": 600, "queues/0/reservationAfterSeconds": 60,
                 "config": {"reservation": {"afterSeconds": 300}},
                 "expect/reservations": {"j": None}})
    assert sc.jobs[0].expected_runtime == 600.0 and sc.queues[0].reservation_after == 60.0
    assert sc.config.reservation_after == 300.0 and sc.expect.reservations == {"j": None}
    assert run(sc).passed
    with pytest.raises(ScenarioError, match=r"jobs\[0\]\.expectedRuntimeSeconds"):
        load(**{"jobs/0/expectedRuntimeSeconds": -5})
    with pytest.raises(ScenarioError, match=r"expect\.reservations\.j"):
        load(**{"expect/reservations": {"j": "node0"}})
    got = run(load(**{"expect/reservations": {"j": ["node0"]}}))
    assert got.mismatches == ["after cycle 1: reservation of j: None, expected ['node0']"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1, r"queues\[0\]\.resources\.gpu\.lendingLimit: must be at least 0, got -1"),
        (3, r"queues\[0\]\.resources\.gpu\.lendingLimit: may not exceed quota \(2\), got 3"),
        ("lots", r"queues\[0\]\.resources\.gpu\.lendingLimit: "),
    ],
)
def test_bad_lending_limit_names_its_path(value, message):
    with pytest.raises(ScenarioError, match=message):
        load(**{"queues/0/resources/gpu/lendingLimit": value})


def test_lending_limit_needs_a_finite_quota():
    data = yaml.safe_load(BASE)
    data["queues"][0]["resources"]["gpu"] = {"quota": -1, "lendingLimit": 1}
    with pytest.raises(ScenarioError, match=r"gpu\.lendingLimit: needs a finite quota"):
        parse(data)


def test_lending_limit_is_read_in_natural_units():
    data = yaml.safe_load(BASE)
    data["queues"][0]["resources"]["memory"] = {"quota": 1024, "lendingLimit": 256}
    data["queues"][0]["resources"]["gpu"]["lendingLimit"] = 0.5
    queue = parse(data).queues[0]
    assert queue.gpu.lending_limit == Fraction(1, 2)
    assert queue.memory.lending_limit == 256 * 2**20
    assert queue.kept_quota() == {"gpu": Fraction(3, 2), "memory": 768 * 2**20}
    assert queue.cpu.lending_limit is None


def test_lending_limit_is_refused_under_compat_kai():
    data = yaml.safe_load(BASE)
    data["config"] = {"compat": "kai"}
    data["queues"][0]["resources"]["gpu"]["lendingLimit"] = 1
    with pytest.raises(ScenarioError, match=r"^queues\[0\]\.resources\.gpu\.lendingLimit: not "
                                            r"available under compat: kai"):
        parse(data)


def test_gpu_types_are_read_by_type_name():
    data = yaml.safe_load(BASE)
    data["queues"][0]["resources"]["gpu"]["types"] = {
        "NVIDIA-H100-80GB-HBM3": {"quota": 2, "limit": 3}, "l40s": {"overQuotaWeight": 2}}
    queue = parse(data).queues[0]
    assert queue.gpu_types["H100"].quota == 2 and queue.gpu_types["H100"].limit == 3
    assert queue.gpu_types["L40S"].over_quota_weight == 2


@pytest.mark.parametrize(("entry", "message"), [
    ({"quota": -2}, r"queues\[0\]\.resources\.gpu\.types\.H100\.quota: must be -1"),
    ({"quota": 3, "limit": 1}, r"queues\[0\]\.resources\.gpu\.types\.H100\.limit: may not be "
                               r"below quota"),
    ({"lendingLimit": 1}, r"queues\[0\]\.resources\.gpu\.types\.H100\.lendingLimit: unknown key"),
])
def test_bad_gpu_type_names_its_path(entry, message):
    data = yaml.safe_load(BASE)
    data["queues"][0]["resources"]["gpu"]["types"] = {"H100": entry}
    with pytest.raises(ScenarioError, match=message):
        parse(data)


def test_gpu_types_only_for_gpu_and_refused_under_compat_kai():
    data = yaml.safe_load(BASE)
    data["queues"][0]["resources"]["cpu"] = {"types": {"H100": {"quota": 1}}}
    with pytest.raises(ScenarioError, match=r"resources\.cpu\.types: only for gpu"):
        parse(data)
    data = yaml.safe_load(BASE)
    data["config"] = {"compat": "kai"}
    data["queues"][0]["resources"]["gpu"]["types"] = {"H100": {"quota": 1}}
    with pytest.raises(ScenarioError, match=r"^queues\[0\]\.resources\.gpu\.types: not "
                                            r"available under compat: kai"):
        parse(data)
