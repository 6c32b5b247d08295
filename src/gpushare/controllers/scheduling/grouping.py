"""Which PodGroup a pod belongs to: the pod-grouper's rules, as pure functions.

A pod's owner chain (pod → ReplicaSet → Deployment, pod → Job → CronJob, ...) is walked
to its top owner; the workload kind decides the gang size, the default priority and
whether the workload shares one PodGroup or each pod gets its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpushare.api.contracts import (
    DEFAULT_QUEUE,
    MIN_MEMBER_ANNOTATION,
    PODGROUP_API_VERSION,
    PREEMPTIBILITY_LABEL,
    PRIORITY_LABEL,
    QUEUE_LABEL,
)
from gpushare.api.contracts import SKIP_PODGROUPER_LABEL as SKIP_LABEL
from gpushare.api.objects import Meta, Obj, controller_reference, metadata

# (kind, namespace, name, uid) -> the owner object, or None when it cannot be read
OwnerLookup = Callable[[str, str, str, str], Obj | None]

PREEMPTIBILITY_VALUES = ("preemptible", "non-preemptible", "semi-preemptible")

# Workloads whose pods are each their own gang of one (serving replicas come and go alone).
PER_POD_KINDS = frozenset({"Deployment", "ReplicaSet", "ReplicationController"})
DEFAULT_PRIORITY_BY_KIND = {"Deployment": "inference"}
DEFAULT_PRIORITY = "train"
MAX_CHAIN = 8  # owner chains are short; a cycle must not loop forever


@dataclass(frozen=True, slots=True)
class PodGroupPlan:
    """What the pod-grouper wants to exist for one pod."""

    name: str
    namespace: str
    owner: Obj  # the ownerReference the PodGroup carries
    min_member: int
    queue: str
    priority_class_name: str
    preemptibility: str | None
    top_owner_kind: str
    warnings: tuple[str, ...] = ()

    def spec(self) -> Obj:
        spec: Obj = {
            "minMember": self.min_member,
            "queue": self.queue,
            "priorityClassName": self.priority_class_name,
        }
        if self.preemptibility:
            spec["preemptibility"] = self.preemptibility
        return spec

    def body(self) -> Obj:
        return {
            "apiVersion": PODGROUP_API_VERSION,
            "kind": "PodGroup",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {QUEUE_LABEL: self.queue},
                "ownerReferences": [self.owner],
            },
            "spec": self.spec(),
        }


def _labels(obj: Obj) -> dict[str, str]:
    return Meta.of(obj).labels


def _annotations(obj: Obj) -> dict[str, str]:
    return Meta.of(obj).annotations


def _stub(ref: Obj, namespace: str) -> Obj:
    """An owner we cannot read, known only from the reference to it."""
    return {
        "apiVersion": ref.get("apiVersion", ""),
        "kind": ref.get("kind", ""),
        "metadata": {"name": ref.get("name", ""), "uid": ref.get("uid", ""),
                     "namespace": namespace},
    }


def owner_chain(pod: Obj, lookup: OwnerLookup) -> list[Obj]:
    """``[pod, owner, owner's owner, ...]`` up to the top owner."""
    chain = [pod]
    namespace = metadata(pod).get("namespace", "")
    current = pod
    for _ in range(MAX_CHAIN):
        ref = controller_reference(current)
        if ref is None:
            break
        owner = lookup(ref.get("kind", ""), namespace, ref.get("name", ""), ref.get("uid", ""))
        if owner is None:
            chain.append(_stub(ref, namespace))
            break
        owner = dict(owner)
        owner.setdefault("kind", ref.get("kind", ""))
        owner.setdefault("apiVersion", ref.get("apiVersion", ""))
        chain.append(owner)
        current = owner
    return chain


def reference_to(obj: Obj) -> Obj:
    meta = metadata(obj)
    return {
        "apiVersion": obj.get("apiVersion", "v1"),
        "kind": obj.get("kind", "Pod"),
        "name": meta.get("name", ""),
        "uid": meta.get("uid", ""),
        "blockOwnerDeletion": False,
        "controller": False,
    }


def skips_grouping(chain: list[Obj]) -> bool:
    return any(_labels(obj).get(SKIP_LABEL) == "true" for obj in (chain[0], chain[-1]))


def plan_podgroup(chain: list[Obj], default_queue: str = DEFAULT_QUEUE) -> PodGroupPlan:
    """The PodGroup for the pod at ``chain[0]``, given its owner chain."""
    pod, top = chain[0], chain[-1]
    top_kind = str(top.get("kind", "Pod"))
    if top_kind in PER_POD_KINDS:
        group_owner = pod
    elif top_kind == "CronJob" and len(chain) >= 3:
        group_owner = chain[-2]  # every run of a CronJob is its own gang
    else:
        group_owner = top
    owner_meta = metadata(group_owner)
    warnings: list[str] = []

    min_member = 1
    if group_owner.get("kind") == "Job":
        text = _annotations(group_owner).get(MIN_MEMBER_ANNOTATION)
        if text is not None:
            try:
                min_member = int(text)
                if min_member < 1:
                    raise ValueError
            except ValueError:
                warnings.append(
                    f"annotation {MIN_MEMBER_ANNOTATION}={text!r} is not a positive integer;"
                    " using 1"
                )
                min_member = 1

    sources = (top, group_owner, pod)
    queue = _first_label(sources, QUEUE_LABEL) or default_queue
    priority = (
        _first_label((top, pod), PRIORITY_LABEL)
        or (pod.get("spec") or {}).get("priorityClassName")
        or DEFAULT_PRIORITY_BY_KIND.get(top_kind, DEFAULT_PRIORITY)
    )
    preemptibility = _first_label((top, pod), PREEMPTIBILITY_LABEL)
    if preemptibility is not None and preemptibility not in PREEMPTIBILITY_VALUES:
        warnings.append(
            f"label {PREEMPTIBILITY_LABEL}={preemptibility!r} is not one of"
            f" {', '.join(PREEMPTIBILITY_VALUES)}; ignored"
        )
        preemptibility = None

    return PodGroupPlan(
        name=f"pg-{owner_meta.get('name', '')}-{owner_meta.get('uid', '')}",
        namespace=str(metadata(pod).get("namespace", "default")),
        owner=reference_to(group_owner),
        min_member=min_member,
        queue=queue,
        priority_class_name=str(priority),
        preemptibility=preemptibility,
        top_owner_kind=top_kind,
        warnings=tuple(warnings),
    )


def _first_label(objs: tuple[Obj, ...], key: str) -> str | None:
    for obj in objs:
        value = _labels(obj).get(key)
        if value:
            return value
    return None


def spec_differs(existing: Obj, plan: PodGroupPlan) -> bool:
    """Whether the stored PodGroup's fields owned by the grouper differ from the plan."""
    spec = existing.get("spec") or {}
    want = plan.spec()
    fields = ("minMember", "queue", "priorityClassName", "preemptibility")
    return any(spec.get(f) != want.get(f) for f in fields)
