"""The pure half of GPU fractions on kubelet nodes: the create-time mutation (a JSONPatch) and
the bind-time ConfigMap."""

from __future__ import annotations

import copy

import jsonpatch
import pytest

from gpushare.api.contracts import GpuBinding
from gpushare.api.gpu import GpuRequestError
from gpushare.api.kubelet_share import (
    MPS_HOST_DIRECTORY,
    MPS_VOLUME,
    SHARE_CONFIGMAP_ANNOTATION,
    ShareConfigError,
    mutation_patch,
    share_configmap,
    share_env,
    unprepared,
)


def pod(annotations=None, name="p", generate_name=None, containers=None, **spec):
    meta = {"namespace": "team-a", "uid": "u-1"}
    if name:
        meta["name"] = name
    if generate_name:
        meta["generateName"] = generate_name
    if annotations is not None:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": containers or [{"name": "c", "image": "x"}], **spec}}


def mutated(obj):
    return jsonpatch.apply_patch(obj, mutation_patch(obj))


def test_fractional_pod_gets_configmap_env_and_mps_mount():
    out = mutated(pod({"gpu-fraction": "0.33"}))
    assert out["metadata"]["annotations"][SHARE_CONFIGMAP_ANNOTATION] == "p-gpu-share"
    container = out["spec"]["containers"][0]
    assert container["envFrom"] == [{"configMapRef": {"name": "p-gpu-share",
                                                      "optional": False}}]
    assert container["volumeMounts"] == [{"name": MPS_VOLUME, "mountPath": MPS_HOST_DIRECTORY}]
    assert out["spec"]["volumes"] == [{"name": MPS_VOLUME, "hostPath": {
        "path": MPS_HOST_DIRECTORY, "type": "Directory"}}]


def test_memory_request_is_a_fraction_too_and_existing_lists_are_appended_to():
    container = {"name": "c", "image": "x", "envFrom": [{"secretRef": {"name": "s"}}],
                 "volumeMounts": [{"name": "data", "mountPath": "/data"}]}
    obj = pod({"gpu-memory": "4096"}, containers=[container, {"name": "d", "image": "y"}],
              volumes=[{"name": "data", "emptyDir": {}}])
    out = mutated(obj)
    first, second = out["spec"]["containers"]
    assert first["envFrom"][0] == {"secretRef": {"name": "s"}}
    assert first["envFrom"][1]["configMapRef"]["name"] == "p-gpu-share"
    assert [m["name"] for m in first["volumeMounts"]] == ["data", MPS_VOLUME]
    assert second["envFrom"][0]["configMapRef"]["name"] == "p-gpu-share"
    assert [v["name"] for v in out["spec"]["volumes"]] == ["data", MPS_VOLUME]


def test_mutation_is_idempotent():
    once = mutated(pod({"gpu-fraction": "0.5"}))
    assert mutation_patch(copy.deepcopy(once)) == []


def test_whole_gpu_and_cpu_pods_are_left_alone():
    limits = {"resources": {"limits": {"nvidia.com/gpu": "1"}}}
    assert mutation_patch(pod(containers=[{"name": "c", "image": "x", **limits}])) == []
    assert mutation_patch(pod()) == []


def test_generate_name_pods_get_a_configmap_name_of_their_own():
    a = mutated(pod({"gpu-fraction": "0.5"}, name=None, generate_name="job-"))
    b = mutated(pod({"gpu-fraction": "0.5"}, name=None, generate_name="job-"))
    name_a = a["metadata"]["annotations"][SHARE_CONFIGMAP_ANNOTATION]
    assert name_a.startswith("job-") and name_a.endswith("-gpu-share")
    assert name_a != b["metadata"]["annotations"][SHARE_CONFIGMAP_ANNOTATION]
    assert a["spec"]["containers"][0]["envFrom"][0]["configMapRef"]["name"] == name_a


def test_malformed_fraction_is_an_error_naming_the_annotation():
    with pytest.raises(GpuRequestError, match="gpu-fraction"):
        mutation_patch(pod({"gpu-fraction": "1.5"}))


def test_fraction_of_several_gpus_is_refused_naming_the_annotation():
    with pytest.raises(ShareConfigError, match="gpu-fraction-num-devices"):
        mutation_patch(pod({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2"}))


def test_share_env_from_portion_and_gpu_memory():
    env = share_env(GpuBinding((3,), 330), gpu_memory_mib=81920)
    assert env["NVIDIA_VISIBLE_DEVICES"] == "3"
    assert env["CUDA_VISIBLE_DEVICES"] == "0"
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == f"{MPS_HOST_DIRECTORY}/gpu3/pipe"
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "33"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={81920 * 330 // 1000}M"


def test_share_env_memory_request_wins_over_portion():
    env = share_env(GpuBinding((0,), 100, memory_mib=4096), gpu_memory_mib=40960)
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=4096M"
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "10"


@pytest.mark.parametrize("binding,memory,field", [
    (GpuBinding((0, 1), 500), 1000, "gpu-indices"),
    (GpuBinding((0,), 1000), 1000, "gpu-portion"),
    (GpuBinding((0,), 500), 0, "gpu memory"),
])
def test_share_env_refuses_what_mps_cannot_enforce(binding, memory, field):
    with pytest.raises(ShareConfigError, match=field):
        share_env(binding, memory)


def test_configmap_is_owned_by_the_pod():
    obj = mutated(pod({"gpu-fraction": "0.25"}))
    cm = share_configmap(obj, GpuBinding((1,), 250), 16384)
    assert cm["metadata"]["name"] == "p-gpu-share"
    assert cm["metadata"]["namespace"] == "team-a"
    assert cm["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert cm["data"]["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=4096M"


def test_a_pod_the_webhook_did_not_prepare_is_named_unprepared():
    plain = pod({"gpu-fraction": "0.5"})
    assert "gpushare webhook" in (unprepared(plain) or "")
    ready = mutated(plain)
    assert unprepared(ready) is None
    ready["spec"]["containers"].append({"name": "late", "image": "x"})  # added by hand
    assert "spec.containers[1].envFrom" in (unprepared(ready) or "")
