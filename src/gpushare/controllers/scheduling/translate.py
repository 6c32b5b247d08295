"""API objects (Nodes, Queues, PodGroups, Pods) to the scheduler core's model.

Pure functions: the scheduler loop feeds each watched change through them and hands the
result to the core's live state as a delta.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from fractions import Fraction
from typing import Any

from gpushare.api.contracts import (
    DEFAULT_QUEUE,
    EXPECTED_RUNTIME_ANNOTATION,
    GPU_MEMORY_LABEL,
    GPU_RESOURCE,
)
from gpushare.api.gpu import GpuRequestError, bound_gpus, gpu_request
from gpushare.api.objects import Obj, metadata
from gpushare.api.quantity import QuantityError, to_int, to_milli
from gpushare.api.taints import Taint
from gpushare.api.timefmt import timestamp
from gpushare.controllers.scheduling import taints as node_taints
from gpushare.model import GPU, Job, Node, Pod, PodStatus, Queue, ResourceSpec
from gpushare.model.gpu_products import PRODUCTS, gpu_type_name
from gpushare.model.node import TAINTS_LABEL
from gpushare.model.quantities import CPU, MEMORY, to_fraction
from gpushare.model.queue import gpu_type_error, lending_limit_error
from gpushare.scheduler.config import NODE_POOL_LABEL
from gpushare.scheduler.fragmentation import GPU_PRODUCT_LABEL

SUBGROUP_LABEL = "kai.scheduler/subgroup-name"
PREEMPTION_DELAY_ANNOTATION = "kai.scheduler/preemption-delay"
STALENESS_ANNOTATION = "kai.scheduler/staleness-grace-period"
DEFAULT_PRIORITY = 50  # when no PriorityClass resolves, as KAI
NON_PREEMPTIBLE_FROM = 100
MB = 1000 * 1000  # Queue memory quotas are in MB (10^6 bytes), as KAI's

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class TranslateError(ValueError):
    """An object the scheduler cannot use; the message names the field."""


def parse_duration(text: str | None) -> float:
    """A Go duration (``"1h30m"``, ``"90s"``, ``"500ms"``) in seconds; ``""`` is 0."""
    if not text:
        return 0.0
    text = str(text).strip()
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    if body == "0":
        return 0.0
    pos = 0
    total = 0.0
    for match in _DURATION.finditer(body):
        if match.start() != pos:
            raise TranslateError(f"{text!r} is not a duration (e.g. 90s, 10m, 1h30m)")
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(body) or not body:
        raise TranslateError(f"{text!r} is not a duration (e.g. 90s, 10m, 1h30m)")
    return sign * total


# ------------------------------------------------------------------------------ nodes


def node_from_api(node: Obj) -> Node:
    meta = metadata(node)
    status = node.get("status") or {}
    alloc = status.get("allocatable") or status.get("capacity") or {}
    labels = dict(meta.get("labels") or {})
    gpus = _int_quantity(alloc.get(GPU_RESOURCE, 0))
    memory_mib = 0
    try:
        memory_mib = int(labels.get(GPU_MEMORY_LABEL, "0"))
    except ValueError:
        memory_mib = 0
    if memory_mib <= 0:
        product = labels.get(GPU_PRODUCT_LABEL, "")
        known = [p for p in PRODUCTS.values() if p.product == product]
        memory_mib = known[0].memory_mib if known else 81920
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    unschedulable = bool((node.get("spec") or {}).get("unschedulable"))
    return Node(
        name=str(meta.get("name", "")),
        gpus=gpus,
        gpu_memory_mib=memory_mib,
        cpu_millis=_milli_quantity(alloc.get("cpu", "0")),
        memory_bytes=_int_quantity(alloc.get("memory", "0")),
        max_pods=_int_quantity(alloc.get("pods", "110")) or 110,
        labels=node_taints.node_labels(node, labels),
        ready=ready and not unschedulable,
        cordoned=unschedulable,
    )


def _int_quantity(value: Any) -> int:
    try:
        return to_int(value)
    except (QuantityError, ValueError):
        return 0


def _milli_quantity(value: Any) -> int:
    try:
        return to_milli(value)
    except (QuantityError, ValueError):
        return 0


# ----------------------------------------------------------------------------- queues


def queue_from_api(queue: Obj) -> Queue:
    """A Queue; omitted resource fields take the model's defaults (quota 0, no limit,
    weight 1), so a queue that leaves out ``memory`` still runs pods that ask for memory."""
    meta = metadata(queue)
    spec = queue.get("spec") or {}
    name = str(meta.get("name", ""))
    resources: dict[str, ResourceSpec] = {}
    given = spec.get("resources") or {}
    for resource, scale in ((GPU, 1), (CPU, 1), (MEMORY, MB)):
        block = given.get(resource) or {}
        quota = _amount(block, "quota", Fraction(0), scale, name, resource)
        resources[resource] = ResourceSpec(
            quota=quota,
            limit=_amount(block, "limit", Fraction(-1), scale, name, resource),
            over_quota_weight=_amount(block, "overQuotaWeight", Fraction(1), 1, name, resource),
            lending_limit=_lending_limit(block, quota, scale, name, resource),
        )
    try:
        priority = int(spec.get("priority", 100))
    except (TypeError, ValueError):
        raise TranslateError(f"queue {name}: spec.priority must be an integer") from None
    return Queue(
        name=name,
        parent=spec.get("parentQueue") or None,
        priority=priority,
        resources=resources,
        preempt_min_runtime=parse_duration(spec.get("preemptMinRuntime")),
        reclaim_min_runtime=parse_duration(spec.get("reclaimMinRuntime")),
        created_at=timestamp(meta.get("creationTimestamp")),
        reservation_after=_reservation_after(spec, name),
        gpu_types=_gpu_types((given.get(GPU) or {}).get("types"), name),
    )


def _gpu_types(raw: Any, queue: str) -> dict[str, ResourceSpec]:
    """``spec.resources.gpu.types``: quota, limit and over-quota weight per GPU type."""
    if raw is None:
        return {}
    path = f"queue {queue}: spec.resources.gpu.types"
    if not isinstance(raw, dict):
        raise TranslateError(f"{path}: expected an object")
    out: dict[str, ResourceSpec] = {}
    for key, block in raw.items():
        kind = gpu_type_name(str(key))
        if kind in out:
            raise TranslateError(f"{path}.{key}: GPU type {kind} given twice")
        if not isinstance(block, dict):
            raise TranslateError(f"{path}.{key}: expected an object")
        where = f"types.{key}"
        quota = _amount(block, "quota", Fraction(0), 1, queue, GPU + "." + where)
        limit = _amount(block, "limit", Fraction(-1), 1, queue, GPU + "." + where)
        weight = _amount(block, "overQuotaWeight", Fraction(1), 1, queue, GPU + "." + where)
        problem = gpu_type_error(quota, limit, weight)
        if problem is not None:
            raise TranslateError(f"{path}.{key}.{problem[0]} {problem[1]}")
        out[kind] = ResourceSpec(quota, limit, weight)
    return out


def refuse_gpu_types_under_kai(queue: Queue) -> None:
    """Under ``compat: kai`` a queue may not give GPU figures per type (KAI has none)."""
    if queue.gpu_types:
        raise TranslateError(
            f"queue {queue.name}: spec.resources.gpu.types is not available under compat: "
            "kai (KAI has no per-GPU-type quota)")


def _lending_limit(block: Obj, quota: Fraction, scale: int, queue: str,
                   resource: str) -> Fraction | None:
    """``spec.resources.<r>.lendingLimit`` (None: unset), checked against the quota."""
    if block.get("lendingLimit") is None:
        return None
    lending = _amount(block, "lendingLimit", Fraction(0), scale, queue, resource)
    problem = lending_limit_error(quota, lending)
    if problem is not None:
        raise TranslateError(f"queue {queue}: spec.resources.{resource}.lendingLimit {problem}")
    return lending


def refuse_lending_under_kai(queue: Queue) -> None:
    """Under ``compat: kai`` a queue may not set ``lendingLimit`` (KAI has no such field):
    a TranslateError naming the first field that does."""
    for resource in (GPU, CPU, MEMORY):
        if queue.resources[resource].lending_limit is not None:
            raise TranslateError(
                f"queue {queue.name}: spec.resources.{resource}.lendingLimit is not available "
                "under compat: kai (KAI has no lending limit)")


def _reservation_after(spec: Obj, queue: str) -> float | None:
    """``spec.reservationAfter``: how long a gang of the queue waits before nodes are
    reserved for it (absent: the scheduler config's; negative: never)."""
    text = spec.get("reservationAfter")
    if text is None or text == "":
        return None
    try:
        return parse_duration(str(text))
    except TranslateError as error:
        raise TranslateError(f"queue {queue}: spec.reservationAfter: {error}") from None


def _amount(
    block: Obj, field: str, default: Fraction, scale: int, queue: str, resource: str
) -> Fraction:
    if block.get(field) is None:
        return default
    try:
        value = to_fraction(block[field])
    except ValueError:
        raise TranslateError(
            f"queue {queue}: spec.resources.{resource}.{field} must be a number"
        ) from None
    if value == -1:
        return value
    return value * scale


# -------------------------------------------------------------------- priority classes

PREEMPTION_POLICIES = ("PreemptLowerPriority", "Never")


def priority_class_of(obj: Obj) -> tuple[int, bool]:
    """A PriorityClass's value and whether pods of it may evict others to be placed
    (``preemptionPolicy``: ``PreemptLowerPriority``, the default, or ``Never``)."""
    name = str((obj.get("metadata") or {}).get("name", ""))
    value = obj.get("value", 0)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TranslateError(f"priorityclass {name}: value must be an integer")
    policy = obj.get("preemptionPolicy") or "PreemptLowerPriority"
    if policy not in PREEMPTION_POLICIES:
        raise TranslateError(
            f"priorityclass {name}: preemptionPolicy {policy!r} is not one of"
            f" {', '.join(PREEMPTION_POLICIES)}"
        )
    return value, policy != "Never"


# ------------------------------------------------------------------------- podgroups


def job_from_podgroup(pg: Obj, priorities: dict[str, int],
                      never_preempt: frozenset[str] | set[str] = frozenset()) -> Job:
    meta = metadata(pg)
    spec = pg.get("spec") or {}
    annotations = meta.get("annotations") or {}
    priority_name = spec.get("priorityClassName") or ""
    priority = priorities.get(priority_name, DEFAULT_PRIORITY)
    preemptibility = spec.get("preemptibility")
    if preemptibility in ("preemptible", "semi-preemptible"):
        preemptible = True
    elif preemptibility == "non-preemptible":
        preemptible = False
    else:
        preemptible = priority < NON_PREEMPTIBLE_FROM
    staleness_text = spec.get("stalenessGracePeriod") or annotations.get(STALENESS_ANNOTATION)
    try:
        min_member = int(spec.get("minMember", 1) if spec.get("minMember") is not None else 1)
    except (TypeError, ValueError):
        min_member = 1
    return Job(
        name=str(meta.get("name", "")),
        namespace=str(meta.get("namespace", "default")),
        queue=str(spec.get("queue") or DEFAULT_QUEUE),
        priority=priority,
        preemptible=preemptible,
        semi_preemptible=preemptibility == "semi-preemptible",
        min_member=max(min_member, 0),
        created_at=timestamp(meta.get("creationTimestamp")),
        preemption_delay=_safe_duration(
            spec.get("preemptionDelay") or annotations.get(PREEMPTION_DELAY_ANNOTATION)
        ),
        staleness_grace=_safe_duration(staleness_text) if staleness_text else None,
        may_preempt=priority_name not in never_preempt,
    )


def expected_runtime(pg: Obj) -> float | None:
    """The PodGroup's declared maximum runtime (``gpushare.io/expected-runtime``), in
    seconds; None when it declares none."""
    meta = metadata(pg)
    text = (meta.get("annotations") or {}).get(EXPECTED_RUNTIME_ANNOTATION)
    if text is None:
        return None
    where = (f"podgroup {meta.get('namespace')}/{meta.get('name')}: annotation "
             f"{EXPECTED_RUNTIME_ANNOTATION}")
    try:
        seconds = parse_duration(str(text))
    except TranslateError as error:
        raise TranslateError(f"{where}: {error}") from None
    if seconds <= 0:
        raise TranslateError(f"{where}: must be a positive duration, got {text!r}")
    return seconds


def _safe_duration(text: str | None) -> float:
    try:
        return parse_duration(text)
    except TranslateError:
        return 0.0


# ------------------------------------------------------------------------------ pods


def cpu_memory_requests(pod: Obj) -> tuple[int, int]:
    """Millicores and bytes: the sum over containers, or the largest init container."""
    spec = pod.get("spec") or {}

    def requests(container: Any, path: str) -> tuple[int, int]:
        if not isinstance(container, dict):
            raise TranslateError(f"{path} is not an object")
        resources = container.get("resources") or {}
        req = resources.get("requests") if isinstance(resources, dict) else None
        if not isinstance(req or {}, dict):
            raise TranslateError(f"{path}.resources.requests is not a map of quantities")
        req = req or {}
        return (_pod_quantity(req.get("cpu", 0), f"{path}.resources.requests.cpu", True),
                _pod_quantity(req.get("memory", 0), f"{path}.resources.requests.memory", False))

    cpu = memory = 0
    for field_name in ("containers", "initContainers"):
        containers = spec.get(field_name) or []
        if not isinstance(containers, list):
            raise TranslateError(f"spec.{field_name} is not a list of containers")
        for i, container in enumerate(containers):
            c, m = requests(container, f"spec.{field_name}[{i}]")
            if field_name == "containers":
                cpu += c
                memory += m
            else:
                cpu, memory = max(cpu, c), max(memory, m)
    return cpu, memory


def _pod_quantity(value: Any, path: str, milli: bool) -> int:
    """A pod's request; an invalid, infinite or out-of-range one makes the pod unusable
    (it is reported, not scheduled) instead of breaking the cycle's arithmetic."""
    try:
        return to_milli(value) if milli else to_int(value)
    except (QuantityError, ValueError, TypeError):
        raise TranslateError(f"{path}: {value!r} is not a valid quantity") from None


def pod_status(pod: Obj) -> PodStatus:
    phase = (pod.get("status") or {}).get("phase", "Pending")
    if phase == "Succeeded":
        return PodStatus.SUCCEEDED
    if phase == "Failed":
        return PodStatus.FAILED
    node = (pod.get("spec") or {}).get("nodeName")
    if node and metadata(pod).get("deletionTimestamp"):
        return PodStatus.RELEASING
    if node:
        return PodStatus.RUNNING
    return PodStatus.PENDING


Affinity = tuple[tuple[str, tuple[str, ...]], ...]


def node_affinity(pod: Obj) -> Affinity:
    """The pod's required node affinity as the core's ``(label, allowed values)`` terms.

    ``requiredDuringSchedulingIgnoredDuringExecution`` holds node selector terms, any of
    which may match; each term's ``matchExpressions`` must all hold. The core keeps one
    conjunction of ``In`` constraints, so: with one term, its ``In`` expressions (the same
    label twice: the values both allow); with several, each label that every term
    constrains with ``In`` may take the values any term allows (exact when each term is a
    single ``In`` on that label, the form ``nvidia.com/gpu.product In [...]`` takes).
    Other operators (``NotIn``, ``Exists``, ``DoesNotExist``, ``Gt``, ``Lt``) and
    ``matchFields`` are not enforced by the core; preferred affinity is not a constraint.
    """
    path = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    required = ((((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if not required:
        return ()
    if not isinstance(required, dict):
        raise TranslateError(f"{path}: expected an object")
    terms = required.get("nodeSelectorTerms") or []
    if not isinstance(terms, list):
        raise TranslateError(f"{path}.nodeSelectorTerms: expected a list")
    per_term = [_term_in_constraints(t, f"{path}.nodeSelectorTerms[{i}]")
                for i, t in enumerate(terms)]
    if not per_term:
        return ()
    shared = set(per_term[0]).intersection(*per_term[1:])
    out = []
    for key in sorted(shared):
        allowed: set[str] = set()
        for term in per_term:
            allowed |= term[key]
        out.append((key, tuple(sorted(allowed))))
    return tuple(out)


def _term_in_constraints(term: Any, path: str) -> dict[str, set[str]]:
    if not isinstance(term, dict):
        raise TranslateError(f"{path}: expected an object")
    exprs = term.get("matchExpressions") or []
    if not isinstance(exprs, list):
        raise TranslateError(f"{path}.matchExpressions: expected a list")
    out: dict[str, set[str]] = {}
    for j, expr in enumerate(exprs):
        where = f"{path}.matchExpressions[{j}]"
        if not isinstance(expr, dict) or not isinstance(expr.get("key"), str):
            raise TranslateError(f"{where}.key: expected a label name")
        if expr.get("operator") != "In":
            continue
        values = expr.get("values")
        if not isinstance(values, list) or not values or not all(
                isinstance(v, str) for v in values):
            raise TranslateError(f"{where}.values: operator In needs a list of strings")
        key = expr["key"]
        out[key] = set(values) if key not in out else out[key] & set(values)
    return out


def pod_from_api(pod: Obj, job_key: str, index: int, started_at: float,
                 taint_sets: Iterable[tuple[Taint, ...]] = ()) -> Pod:
    """The core's pod; ``taint_sets`` are the distinct blocking taint sets of the
    cluster's nodes, of which the pod may use those it tolerates."""
    meta = metadata(pod)
    spec = pod.get("spec") or {}
    status = pod_status(pod)
    cpu, memory = cpu_memory_requests(pod)
    try:
        request = gpu_request(pod)
    except GpuRequestError as error:
        raise TranslateError(str(error)) from None
    node = spec.get("nodeName") or None
    indices: tuple[int, ...] = ()
    portion = 0
    if node and status not in (PodStatus.SUCCEEDED, PodStatus.FAILED):
        indices, portion = bound_gpus(pod)
        if request.whole and not portion:
            portion = 1000
    else:
        node = None if status in (PodStatus.SUCCEEDED, PodStatus.FAILED) else node
    return Pod(
        name=str(meta.get("name", "")),
        namespace=str(meta.get("namespace", "default")),
        job=job_key,
        index=index,
        gpu=request,
        cpu_millis=cpu,
        memory_bytes=memory,
        status=status,
        node=node,
        gpu_indices=indices,
        portion=portion,
        started_at=started_at,
        node_selector=_node_selector(meta, spec),
        node_affinity=node_affinity(pod) + _taint_term(pod, taint_sets),
        subgroup=(meta.get("labels") or {}).get(SUBGROUP_LABEL),
    )


def _node_selector(meta: Obj, spec: Obj) -> dict[str, str]:
    """The pod's ``nodeSelector``, plus its node pool (the ``kai.scheduler/node-pool``
    label): a pod of a pool runs on that pool's nodes, placed by the pool's rules."""
    selector = dict(spec.get("nodeSelector") or {})
    pool = (meta.get("labels") or {}).get(NODE_POOL_LABEL)
    if pool:
        selector[NODE_POOL_LABEL] = str(pool)
    return selector


def _taint_term(pod: Obj, taint_sets: Iterable[tuple[Taint, ...]]
                ) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The required-affinity term that keeps the pod off nodes whose taints it does not
    tolerate; none while no node has a blocking taint."""
    sets = tuple(taint_sets)
    if not sets:
        return ()
    return ((TAINTS_LABEL, node_taints.allowed(pod, sets)),)
