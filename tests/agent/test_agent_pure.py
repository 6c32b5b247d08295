"""The agent's pure parts: `$(VAR)` expansion, GPU share → env and limits, pod spec → plan."""

from __future__ import annotations

import base64

import pytest

from gpushare.agent.gpu.gpu_share import (
    GpuAssignmentError,
    MpsTarget,
    share_env,
    share_from_annotations,
    watchdog_limit_mib,
)
from gpushare.agent.node.inventory import declared_gpus, declared_uuid
from gpushare.agent.pods.envexpand import expand
from gpushare.agent.pods.podspec import PodSpecError, decode_secret, plan_container

H100 = declared_gpus("node-a", "4xH100")


# --- $(VAR) expansion -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$(A)", "alpha"),
        ("x-$(A)-$(B)", "x-alpha-beta"),
        ("$(MISSING)", "$(MISSING)"),  # undefined: left as written
        ("$$(A)", "$(A)"),  # escaped
        ("$$$(A)", "$alpha"),
        ("cost $5", "cost $5"),  # a lone $ stays
        ("$(A", "$(A"),  # unterminated
        ("$", "$"),
        ("$(A)$(A)", "alphaalpha"),
    ],
)
def test_expand_follows_kubernetes_rules(text: str, expected: str) -> None:
    assert expand(text, {"A": "alpha", "B": "beta"}) == expected


# --- GPU share --------------------------------------------------------------------------


def test_no_annotations_means_no_gpu_and_hidden_devices() -> None:
    assert share_from_annotations({}, H100) is None
    env = share_env(None)
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"


def test_whole_gpus_map_to_indices_and_uuids() -> None:
    share = share_from_annotations(
        {"gpushare.io/gpu-indices": "2,3", "gpushare.io/gpu-portion": "1"}, H100
    )
    assert share is not None and share.whole
    env = share_env(share)
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3"
    uuids = f"{declared_uuid('node-a', 2)},{declared_uuid('node-a', 3)}"
    assert env["NVIDIA_VISIBLE_DEVICES"] == uuids
    assert env["GPU_PORTION"] == "1"
    assert share.memory_mib == 81559
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in share_env(share, MpsTarget("/p"))


def test_fraction_gets_framework_hints_and_mps_limits() -> None:
    share = share_from_annotations(
        {
            "gpushare.io/gpu-indices": "1",
            "gpushare.io/gpu-portion": "0.33",
            "gpushare.io/gpu-memory-mib": "26914",
        },
        H100,
    )
    assert share is not None and share.thread_percentage == 33
    plain = share_env(share)
    assert plain["CUDA_VISIBLE_DEVICES"] == "1"
    assert plain["GPU_PORTION"] == "0.33"
    assert plain["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.33"
    assert plain["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    assert "CUDA_MPS_PIPE_DIRECTORY" not in plain
    mps = share_env(share, MpsTarget("/data/mps/gpu1/pipe"))
    # MPS renumbers devices: the client names its GPU by UUID and limits device 0
    assert mps["CUDA_VISIBLE_DEVICES"] == declared_uuid("node-a", 1)
    assert mps["CUDA_MPS_PIPE_DIRECTORY"] == "/data/mps/gpu1/pipe"
    assert mps["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=26914M"
    assert mps["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "33"


def test_memory_defaults_to_the_portion_of_the_gpu() -> None:
    share = share_from_annotations(
        {"gpushare.io/gpu-indices": "0", "gpushare.io/gpu-portion": "0.5"}, H100
    )
    assert share is not None and share.memory_mib == 81559 // 2


def test_watchdog_limit_adds_a_tolerance() -> None:
    share = share_from_annotations(
        {"gpushare.io/gpu-indices": "0", "gpushare.io/gpu-portion": "0.5",
         "gpushare.io/gpu-memory-mib": "40000"}, H100
    )
    assert share is not None
    assert watchdog_limit_mib(share, 0.05, 512) == 42000
    assert watchdog_limit_mib(share, 0.0, 512) == 40512


@pytest.mark.parametrize(
    ("annotations", "field"),
    [
        ({"gpushare.io/gpu-indices": "7"}, "gpushare.io/gpu-indices"),
        ({"gpushare.io/gpu-indices": "a,b"}, "gpushare.io/gpu-indices"),
        ({"gpushare.io/gpu-indices": "1,1"}, "gpushare.io/gpu-indices"),
        ({"gpushare.io/gpu-indices": "0", "gpushare.io/gpu-portion": "1.5"},
         "gpushare.io/gpu-portion"),
        ({"gpushare.io/gpu-indices": "0", "gpushare.io/gpu-portion": "x"},
         "gpushare.io/gpu-portion"),
        ({"gpushare.io/gpu-indices": "0", "gpushare.io/gpu-memory-mib": "-3"},
         "gpushare.io/gpu-memory-mib"),
    ],
)
def test_bad_annotations_name_the_field(annotations: dict[str, str], field: str) -> None:
    with pytest.raises(GpuAssignmentError, match=field.replace(".", r"\.")):
        share_from_annotations(annotations, H100)


def test_declared_uuids_are_stable_and_say_declared() -> None:
    assert declared_uuid("n", 0) == declared_uuid("n", 0)
    assert declared_uuid("n", 0) != declared_uuid("n", 1)
    assert declared_uuid("n", 0) != declared_uuid("m", 0)
    assert declared_uuid("n", 0).startswith("GPU-declared-")


# --- pod spec → plan ----------------------------------------------------------------------


class Values:
    def __init__(self) -> None:
        self.maps = {("ns", "cfg"): {"mode": "fast", "level": "3"}}
        self.secrets = {("ns", "creds"): {"token": "s3cret"}}

    def config_map(self, namespace: str, name: str):
        return self.maps.get((namespace, name))

    def secret(self, namespace: str, name: str):
        return self.secrets.get((namespace, name))


POD = {
    "metadata": {
        "name": "trainer",
        "namespace": "ns",
        "uid": "1234",
        "labels": {"team": "nlp"},
        "annotations": {"gpu-fraction": "0.5"},
    },
    "spec": {"nodeName": "node-a"},
    "status": {"podIP": "127.0.0.1", "hostIP": "127.0.0.1"},
}


def plan(container: dict, gpu_env: dict | None = None):
    return plan_container(
        POD, container, "spec.containers[0]", {"PATH": "/bin"}, gpu_env or {}, Values()
    )


def test_env_resolution_field_refs_config_maps_secrets_and_expansion() -> None:
    p = plan(
        {
            "name": "c",
            "command": ["run", "--name=$(POD_NAME)", "$$(POD_NAME)"],
            "args": ["$(GREETING)", "$(UNKNOWN)"],
            "env": [
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
                {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "TEAM",
                 "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['team']"}}},
                {"name": "FRACTION",
                 "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['gpu-fraction']"}}},
                {"name": "MODE",
                 "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}},
                {"name": "TOKEN",
                 "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
                {"name": "GREETING", "value": "hi-$(POD_NAME)-$(MODE)"},
                {"name": "OPT",
                 "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "x", "optional": True}}},
                {"name": "CPUS", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
            ],
            "resources": {"limits": {"cpu": "1500m"}},
        }
    )
    assert p.argv == ("run", "--name=trainer", "$(POD_NAME)", "hi-trainer-fast", "$(UNKNOWN)")
    assert p.env["NS"] == "ns" and p.env["UID"] == "1234" and p.env["NODE"] == "node-a"
    assert p.env["IP"] == "127.0.0.1"
    assert p.env["TEAM"] == "nlp" and p.env["FRACTION"] == "0.5"
    assert p.env["TOKEN"] == "s3cret"
    assert "OPT" not in p.env
    assert p.env["CPUS"] == "2"  # ceil(1.5)


def test_env_from_with_prefix_and_gpu_env_wins() -> None:
    p = plan(
        {
            "name": "c",
            "command": ["x"],
            "envFrom": [{"configMapRef": {"name": "cfg"}, "prefix": "CFG_"}],
            "env": [{"name": "CUDA_VISIBLE_DEVICES", "value": "0,1,2,3"}],
        },
        gpu_env={"CUDA_VISIBLE_DEVICES": "1"},
    )
    assert p.env["CFG_mode"] == "fast" and p.env["CFG_level"] == "3"
    assert p.env["CUDA_VISIBLE_DEVICES"] == "1"  # a pod cannot widen its GPUs


def test_args_alone_are_the_command_and_no_command_is_an_error() -> None:
    assert plan({"name": "c", "args": ["echo", "hi"]}).argv == ("echo", "hi")
    with pytest.raises(PodSpecError, match=r"spec\.containers\[0\]\.command"):
        plan({"name": "c", "image": "busybox"})


def test_missing_config_map_names_the_field() -> None:
    with pytest.raises(PodSpecError, match=r"spec\.containers\[0\]\.env\[0\]\.valueFrom"):
        plan({"name": "c", "command": ["x"], "env": [
            {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "k"}}}]})


@pytest.mark.parametrize(
    ("working_dir", "expected"), [(None, "."), ("work", "work"), ("/app/src", "app/src")]
)
def test_working_dir_is_inside_the_pod_directory(working_dir, expected) -> None:
    container = {"name": "c", "command": ["x"]}
    if working_dir:
        container["workingDir"] = working_dir
    assert plan(container).working_dir == expected


def test_working_dir_cannot_leave_the_pod_directory() -> None:
    with pytest.raises(PodSpecError, match="workingDir"):
        plan({"name": "c", "command": ["x"], "workingDir": "../../etc"})


def test_secret_data_is_base64_decoded() -> None:
    encoded = base64.b64encode(b"v").decode()
    assert decode_secret({"k": encoded}) == {"k": "v"}
    assert decode_secret(None) is None


def _resource_env(quantity: str, divisor: str | None = None) -> dict[str, str]:
    ref: dict[str, str] = {"resource": "limits.memory"}
    if divisor is not None:
        ref["divisor"] = divisor
    return plan({"name": "c", "command": ["x"], "resources": {"limits": {"memory": quantity}},
                 "env": [{"name": "MEM", "valueFrom": {"resourceFieldRef": ref}}]}).env


def test_resource_field_ref_divides_exactly_and_rounds_up() -> None:
    assert _resource_env("1Gi", "1Mi")["MEM"] == "1024"
    assert _resource_env("100m", "1m")["MEM"] == "100"  # exact: no float drift to 101
    assert _resource_env("1500M", "1G")["MEM"] == "2"


def test_bad_quantities_name_the_field() -> None:
    with pytest.raises(PodSpecError, match=r"env\[0\]\.valueFrom\.resourceFieldRef: 'lots'"):
        _resource_env("lots")
    with pytest.raises(PodSpecError, match=r"env\[0\]\.valueFrom\.divisor: '1Zi'"):
        _resource_env("1Gi", "1Zi")
    with pytest.raises(PodSpecError, match=r"env\[0\]\.valueFrom\.divisor: '0' must be positive"):
        _resource_env("1Gi", "0")
