"""PodGroup ``status.resourcesStatus``: what the group's pods ask for and hold, as KAI's
podgroup-controller writes it.

* ``requested``: the container requests of every active pod (phase Pending or Running),
  plus a fractional pod's GPU share (``gpu-fraction`` × ``gpu-fraction-num-devices`` as
  ``nvidia.com/gpu``; ``gpu-memory`` × devices as ``run.ai/gpu.memory``, in MiB);
* ``allocated``: the same for every pod that holds its place (Running, or Pending once
  bound); its GPUs are those the binding gave it (``gpushare.io/gpu-portion`` ×
  the listed GPUs), so a pod that asked for GPU memory shows the fraction it received;
* ``allocatedNonPreemptible``: ``allocated`` again for a non-preemptible group (by
  ``spec.preemptibility``, else its PriorityClass value ≥ 100); for a semi-preemptible
  one what its first ``minMember`` placed pods hold (its core); absent otherwise.

ResourceLists hold Kubernetes quantities: ``nvidia.com/gpu: 1500m`` is one and a half GPUs,
``cpu: 500m`` half a core, ``memory: 2Gi`` bytes. The controller writes the status
subresource only when the figures differ from what is stored (a status write of ours comes
back as a watch event, finds nothing to change and stops there).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

from gpushare.api.contracts import GPU_RESOURCE, PODGROUP_ANNOTATION
from gpushare.api.gpu import GpuRequestError, bound_gpus, gpu_request
from gpushare.api.objects import Obj
from gpushare.api.quantity import QuantityError, format_bytes, format_milli, to_milli
from gpushare.controllers.scheduling.scheduling_status import condition_of
from gpushare.controllers.scheduling.translate import job_from_podgroup
from gpushare.kube.client import PODGROUPS, PODS, PRIORITY_CLASSES, ApiError, KubeClient, Stopper
from gpushare.kube.informer import WorkQueue, start_workers
from gpushare.kube.informers import InformerFactory
from gpushare.scheduler.semi import core_size

log = logging.getLogger(__name__)

GPU_MEMORY_RESOURCE = "run.ai/gpu.memory"  # MiB of GPU memory, as KAI names it
WORKERS = 4
#: Resources counted in bytes (every other one in thousandths, as ``cpu`` and GPUs).
_BYTE_RESOURCES = ("memory", "ephemeral-storage")

# Amounts kept while summing: bytes for byte resources, MiB for GPU memory, thousandths
# for every other resource.
Amounts = dict[str, int]


def _is_bytes(resource: str) -> bool:
    return resource in _BYTE_RESOURCES or resource.startswith("hugepages-")


def _container_requests(pod: Obj) -> Amounts:
    """The sum of the containers' requests (init containers are not counted, as KAI)."""
    out: Amounts = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") if isinstance(container, dict) else None
        requests = (resources or {}).get("requests") if isinstance(resources, dict) else None
        for name, value in (requests or {}).items() if isinstance(requests, dict) else ():
            try:
                milli = to_milli(value)
            except (QuantityError, ValueError):
                continue  # the API server refuses such a pod; nothing to count
            amount = -(-milli // 1000) if _is_bytes(name) else milli
            out[name] = out.get(name, 0) + amount
    return out


def _phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def is_active(pod: Obj) -> bool:
    return _phase(pod) in ("Pending", "Running")


def holds_place(pod: Obj) -> bool:
    """Running, or Pending and already bound to a node."""
    phase = _phase(pod)
    if phase == "Running":
        return True
    if phase != "Pending":
        return False
    scheduled = condition_of(pod)
    return bool((pod.get("spec") or {}).get("nodeName")) or (
        scheduled is not None and scheduled.get("status") == "True")


def pod_requested(pod: Obj) -> Amounts:
    """What an active pod asks for: container requests and its GPU share."""
    out = _container_requests(pod)
    try:
        gpu = gpu_request(pod)
    except GpuRequestError:
        return out
    if gpu.whole and GPU_RESOURCE not in out:  # limits only: requests default to them
        out[GPU_RESOURCE] = gpu.whole * 1000
    if gpu.portion:
        out[GPU_RESOURCE] = out.get(GPU_RESOURCE, 0) + gpu.portion * gpu.devices
    if gpu.memory_mib:
        out[GPU_MEMORY_RESOURCE] = gpu.memory_mib * gpu.devices
    return out


def pod_allocated(pod: Obj) -> Amounts:
    """What a placed pod holds: container requests, with the GPUs of its binding."""
    out = _container_requests(pod)
    indices, portion = bound_gpus(pod)
    if indices and portion:
        out[GPU_RESOURCE] = portion * len(indices)
    return out


def _add(total: Amounts, more: Amounts) -> None:
    for name, amount in more.items():
        total[name] = total.get(name, 0) + amount


def resource_list(amounts: Amounts) -> dict[str, str]:
    """Amounts as a ResourceList of canonical quantities, sorted by name."""
    out: dict[str, str] = {}
    for name in sorted(amounts):
        amount = amounts[name]
        if _is_bytes(name):
            out[name] = format_bytes(amount)
        elif name == GPU_MEMORY_RESOURCE:
            out[name] = str(amount)
        else:
            out[name] = format_milli(amount)
    return out


def resources_status(pods: Iterable[Obj], preemptible: bool,
                     core: int | None = None) -> dict[str, dict[str, str]]:
    """A PodGroup's ``status.resourcesStatus`` from its pods; empty lists are left out.

    ``core``: a semi-preemptible group's core size; its first ``core`` placed pods are
    its non-preemptible allocation."""
    requested: Amounts = {}
    allocated: Amounts = {}
    allocated_np: Amounts = {}
    placed = 0
    for pod in pods:
        if is_active(pod):
            _add(requested, pod_requested(pod))
        if holds_place(pod):
            _add(allocated, pod_allocated(pod))
            if not preemptible or (core is not None and placed < core):
                _add(allocated_np, pod_allocated(pod))
            placed += 1
    out: dict[str, dict[str, str]] = {}
    if allocated:
        out["allocated"] = resource_list(allocated)
        if allocated_np:
            out["allocatedNonPreemptible"] = resource_list(allocated_np)
    if requested:
        out["requested"] = resource_list(requested)
    return out


def merge_patch_to(current: Any, wanted: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch turning ``current`` into ``wanted``: what is gone is set to
    null, nested maps are patched key by key."""
    old = current if isinstance(current, dict) else {}
    patch: dict[str, Any] = {key: None for key in old if key not in wanted}
    for key, value in wanted.items():
        if isinstance(value, dict) and isinstance(old.get(key), dict):
            if old[key] != value:
                patch[key] = merge_patch_to(old[key], value)
        elif old.get(key) != value:
            patch[key] = value
    return patch


#: Metadata a write changes without changing what the PodGroup asks for.
_BOOKKEEPING = ("resourceVersion", "managedFields", "generation")


def status_echo(pg: Obj, old: Obj | None, written: dict[str, Any] | None) -> bool:
    """Whether a PodGroup's change leaves its wanted resourcesStatus as it was: only its
    status changed (spec and metadata as before) and the stored resourcesStatus is what
    was last written (the pods' own changes queue the group by themselves)."""
    if old is None or written is None or pg.get("spec") != old.get("spec"):
        return False
    meta, before = pg.get("metadata") or {}, old.get("metadata") or {}
    if {k: v for k, v in meta.items() if k not in _BOOKKEEPING} != {
            k: v for k, v in before.items() if k not in _BOOKKEEPING}:
        return False
    return bool(((pg.get("status") or {}).get("resourcesStatus") or {}) == written)


def _group_of(pod: Obj | None) -> str | None:
    meta = (pod or {}).get("metadata") or {}
    name = (meta.get("annotations") or {}).get(PODGROUP_ANNOTATION)
    return f"{meta.get('namespace')}/{name}" if name else None


def _key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


class PodGroupStatusController:
    """Keeps every PodGroup's ``status.resourcesStatus`` current as its pods come, start,
    finish and go."""

    name = "podgroup-status"

    def __init__(self, client: KubeClient, informers: InformerFactory, stopper: Stopper) -> None:
        self.client = client
        self.stopper = stopper
        self.pods = informers.get(PODS)
        self.podgroups = informers.get(PODGROUPS)
        self.priority_classes = informers.get(PRIORITY_CLASSES)
        self.queue = WorkQueue()
        self._lock = threading.Lock()
        self._members: dict[str, set[str]] = {}  # PodGroup key -> pod keys
        # What was last written, per PodGroup: a cache that has not yet seen the write
        # does not cause it again.
        self._written: dict[str, dict[str, dict[str, str]]] = {}
        self.writes = 0
        self.pods.add_handler(self._on_pod)
        self.podgroups.add_handler(self._on_podgroup)
        self.priority_classes.add_handler(self._on_priority_class)

    def start(self) -> list[threading.Thread]:
        return start_workers(self.queue, self.reconcile, self.stopper, self.name, WORKERS)

    def _on_pod(self, kind: str, pod: Obj, old: Obj | None) -> None:
        key = _key(pod)
        group, before = _group_of(pod), _group_of(old)
        with self._lock:
            if before and before != group:
                self._members.get(before, set()).discard(key)
            if group and kind != "DELETED":
                self._members.setdefault(group, set()).add(key)
            elif group:
                self._members.get(group, set()).discard(key)
        for changed in {group, before} - {None}:
            self.queue.add(str(changed))

    def _on_podgroup(self, kind: str, pg: Obj, old: Obj | None) -> None:
        key = _key(pg)
        if kind == "DELETED":
            self._written.pop(key, None)
            return
        stored = (pg.get("status") or {}).get("resourcesStatus") or {}
        if self._written.get(key, stored) != stored:
            self._written.pop(key, None)  # changed since (or not yet seen): cache decides
        elif kind == "MODIFIED" and status_echo(pg, old, self._written.get(key)):
            return  # its phase or our own write coming back: nothing to work out again
        self.queue.add(key)

    def _on_priority_class(self, kind: str, obj: Obj, old: Obj | None) -> None:
        name = (obj.get("metadata") or {}).get("name")
        for pg in self.podgroups.items():
            if (pg.get("spec") or {}).get("priorityClassName") == name:
                self.queue.add(_key(pg))

    def _priorities(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for pc in self.priority_classes.items():
            try:
                out[str((pc.get("metadata") or {}).get("name"))] = int(pc.get("value", 0))
            except (TypeError, ValueError):
                continue
        return out

    def wanted(self, key: str) -> dict[str, dict[str, str]] | None:
        """The resourcesStatus the PodGroup should carry (None: no such PodGroup)."""
        pg = self.podgroups.get(key)
        if pg is None:
            return None
        with self._lock:
            members = list(self._members.get(key, ()))
        pods = [pod for pod in map(self.pods.get, members)
                if pod is not None and _group_of(pod) == key]
        job = job_from_podgroup(pg, self._priorities())
        core = core_size(job) if job.semi_preemptible else None
        return resources_status(pods, job.preemptible, core)

    def reconcile(self, key: str) -> None:
        wanted = self.wanted(key)
        pg = self.podgroups.get(key)
        if wanted is None or pg is None:
            with self._lock:
                if not self._members.get(key):
                    self._members.pop(key, None)
            return
        current = (pg.get("status") or {}).get("resourcesStatus") or {}
        patch = merge_patch_to(current, wanted)
        if not patch or self._written.get(key) == wanted:
            return
        namespace, _, name = key.partition("/")
        try:
            self.client.merge_patch(PODGROUPS.item(name, namespace, "status"),
                                    {"status": {"resourcesStatus": patch}})
        except ApiError as error:
            if error.not_found:
                return
            raise
        self._written[key] = wanted
        self.writes += 1
