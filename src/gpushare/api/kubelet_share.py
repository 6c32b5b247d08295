"""GPU fractions on nodes the kubelet runs: what a fractional pod's spec gains at create
time and what its per-pod ConfigMap holds at bind time.

At create time a mutating admission webhook adds to each container of a pod that asks for a
GPU fraction an ``envFrom`` reference to a ConfigMap named after the pod (``optional: false``,
so the kubelet holds the container until it exists) and a hostPath mount of the node's MPS
directory. At bind time the scheduler writes that ConfigMap, owned by the pod: the GPU the
pod got, its MPS pipe directory and the MPS limits from its portion. The node daemon runs one
MPS control daemon per GPU under that directory (``<dir>/gpu<index>/pipe``).

Pure: no I/O. The JSONPatch paths follow RFC 6901 (``~1`` for ``/``).
"""

from __future__ import annotations

import secrets
import string
from typing import Any

from gpushare.api.contracts import GPU_DEVICES_ANNOTATION, MILLI, GpuBinding
from gpushare.api.gpu import gpu_request
from gpushare.api.objects import Meta, Obj, metadata

#: The annotation that names the pod's share ConfigMap (set by the mutation, read at bind).
SHARE_CONFIGMAP_ANNOTATION = "gpushare.io/gpu-share-configmap"
CONFIGMAP_SUFFIX = "-gpu-share"
#: The node directory holding one MPS daemon's pipe and log directories per GPU.
MPS_HOST_DIRECTORY = "/run/gpushare/mps"
MPS_VOLUME = "gpushare-mps"
_NAME_SUFFIX_ALPHABET = string.ascii_lowercase + string.digits
_MAX_NAME = 253


class ShareConfigError(ValueError):
    """A binding that cannot be turned into a share ConfigMap; the message names the field."""


def share_configmap_name(pod: Obj) -> str:
    """The ConfigMap the mutation named for this pod (its annotation), else ``<name>-gpu-share``."""
    named = Meta.of(pod).annotations.get(SHARE_CONFIGMAP_ANNOTATION)
    if named:
        return str(named)
    name = str(metadata(pod).get("name") or "")
    if not name:
        raise ShareConfigError("metadata.name: a pod without a name has no share ConfigMap")
    return f"{name}{CONFIGMAP_SUFFIX}"[:_MAX_NAME]


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _new_name(pod: Obj) -> str:
    """The ConfigMap name for a pod at create time; a pod named by ``generateName`` has no
    name yet, so its ConfigMap gets its own random suffix."""
    meta = metadata(pod)
    if meta.get("name"):
        base = str(meta["name"])
    else:
        prefix = str(meta.get("generateName") or "")
        if not prefix:
            raise ShareConfigError("metadata.name: neither name nor generateName is set")
        base = prefix + "".join(secrets.choice(_NAME_SUFFIX_ALPHABET) for _ in range(8))
    return f"{base}{CONFIGMAP_SUFFIX}"[:_MAX_NAME]


def _container_ops(kind: str, index: int, container: Obj, configmap: str,
                   mount_path: str) -> list[dict[str, Any]]:
    base = f"/spec/{kind}/{index}"
    ops: list[dict[str, Any]] = []
    env_from = {"configMapRef": {"name": configmap, "optional": False}}
    if container.get("envFrom") is None:
        ops.append({"op": "add", "path": f"{base}/envFrom", "value": [env_from]})
    elif not any((e.get("configMapRef") or {}).get("name") == configmap
                 for e in container["envFrom"]):
        ops.append({"op": "add", "path": f"{base}/envFrom/-", "value": env_from})
    mount = {"name": MPS_VOLUME, "mountPath": mount_path}
    mounts = container.get("volumeMounts")
    if mounts is None:
        ops.append({"op": "add", "path": f"{base}/volumeMounts", "value": [mount]})
    elif not any(m.get("name") == MPS_VOLUME for m in mounts):
        ops.append({"op": "add", "path": f"{base}/volumeMounts/-", "value": mount})
    return ops


def mutation_patch(pod: Obj, host_directory: str = MPS_HOST_DIRECTORY) -> list[dict[str, Any]]:
    """The JSONPatch that prepares a fractional pod for the kubelet; [] for any other pod.

    Idempotent: a pod already carrying the annotation, reference or volume gains nothing twice.
    """
    request = gpu_request(pod)
    if not request.is_shared:
        return []
    if request.devices != 1:
        raise ShareConfigError(
            f"metadata.annotations[{GPU_DEVICES_ANNOTATION}]: a GPU fraction under MPS runs "
            f"on one GPU, not {request.devices}")
    annotations = Meta.of(pod).annotations
    configmap = str(annotations.get(SHARE_CONFIGMAP_ANNOTATION) or _new_name(pod))
    ops: list[dict[str, Any]] = []
    if "annotations" not in metadata(pod) or metadata(pod)["annotations"] is None:
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {}})
    if SHARE_CONFIGMAP_ANNOTATION not in annotations:
        ops.append({"op": "add",
                    "path": f"/metadata/annotations/{_escape(SHARE_CONFIGMAP_ANNOTATION)}",
                    "value": configmap})
    spec = pod.get("spec") or {}
    volumes = spec.get("volumes")
    volume = {"name": MPS_VOLUME,
              "hostPath": {"path": host_directory, "type": "Directory"}}
    if volumes is None:
        ops.append({"op": "add", "path": "/spec/volumes", "value": [volume]})
    elif not any(v.get("name") == MPS_VOLUME for v in volumes):
        ops.append({"op": "add", "path": "/spec/volumes/-", "value": volume})
    for kind in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(kind) or []):
            ops += _container_ops(kind, index, container, configmap, host_directory)
    return ops


def unprepared(pod: Obj) -> str | None:
    """Why a fractional pod cannot be bound under ``--gpu-share-configmaps`` (the webhook did
    not prepare it: its containers would run without the GPU limits), or None."""
    configmap = Meta.of(pod).annotations.get(SHARE_CONFIGMAP_ANNOTATION)
    if not configmap:
        return (f"metadata.annotations[{SHARE_CONFIGMAP_ANNOTATION}]: missing - the pod was "
                "not prepared by the gpushare webhook, so its containers would not get their "
                "GPU limits; create it again once the webhook runs")
    spec = pod.get("spec") or {}
    for kind in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(kind) or []):
            refs = [(e.get("configMapRef") or {}) for e in container.get("envFrom") or []]
            if not any(r.get("name") == configmap and r.get("optional") is not True
                       for r in refs):
                return (f"spec.{kind}[{index}].envFrom: no required configMapRef {configmap}"
                        " - its processes would not get their GPU limits")
    return None


def share_env(binding: GpuBinding, gpu_memory_mib: int,
              host_directory: str = MPS_HOST_DIRECTORY) -> dict[str, str]:
    """The environment of a fractional pod bound to one GPU on a kubelet node.

    The MPS daemon of that GPU is started with only that GPU visible, so its clients see it as
    device 0; ``NVIDIA_VISIBLE_DEVICES`` is what the NVIDIA container runtime reads to give
    the container that GPU's device nodes.
    """
    if len(binding.indices) != 1:
        raise ShareConfigError(
            f"gpu-indices: a GPU fraction under MPS runs on exactly one GPU, not "
            f"{len(binding.indices)}")
    if not 0 < binding.portion_milli < MILLI:
        raise ShareConfigError(f"gpu-portion: {binding.portion_milli}m is not a fraction")
    if gpu_memory_mib <= 0:
        raise ShareConfigError(f"gpu memory: {gpu_memory_mib} MiB is not a GPU's memory")
    index = binding.indices[0]
    memory = binding.memory_mib or gpu_memory_mib * binding.portion_milli // MILLI
    threads = max(1, min(100, (binding.portion_milli + 5) // 10))
    return {
        "NVIDIA_VISIBLE_DEVICES": str(index),
        "CUDA_VISIBLE_DEVICES": "0",
        "GPUSHARE_GPU_INDEX": str(index),
        "CUDA_MPS_PIPE_DIRECTORY": f"{host_directory}/gpu{index}/pipe",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(threads),
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={min(memory, gpu_memory_mib)}M",
        "GPUSHARE_GPU_MEMORY_MIB": str(min(memory, gpu_memory_mib)),
    }


def share_configmap(pod: Obj, binding: GpuBinding, gpu_memory_mib: int,
                    host_directory: str = MPS_HOST_DIRECTORY) -> Obj:
    """The ConfigMap the scheduler writes before it binds a fractional pod: owned by the pod
    (the garbage collector removes it with the pod)."""
    meta = metadata(pod)
    uid = meta.get("uid")
    if not uid:
        raise ShareConfigError("metadata.uid: the pod must exist before its ConfigMap")
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": share_configmap_name(pod),
            "namespace": meta.get("namespace") or "default",
            "labels": {"gpushare.io/gpu-share": "true"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                 "uid": uid, "blockOwnerDeletion": False}],
        },
        "data": share_env(binding, gpu_memory_mib, host_directory),
    }
