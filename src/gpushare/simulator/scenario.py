"""Scenario files (``shared/scenarios/FORMAT.md``, version 1) into model objects."""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

from gpushare.model.gpu_products import gpu_type_name
from gpushare.model.job import Job, SubGroup
from gpushare.model.node import Node
from gpushare.model.pod import GpuRequest, Pod, PodStatus
from gpushare.model.quantities import CPU, GPU, MEMORY, MIB, MILLI, RESOURCES, mib_to_bytes
from gpushare.model.queue import (
    UNLIMITED,
    Queue,
    ResourceSpec,
    gpu_type_error,
    lending_limit_error,
)
from gpushare.model.schema import (
    ScenarioError,
    as_bool,
    as_int,
    as_list,
    as_number,
    as_opt_str,
    as_str,
    as_str_map,
    check_keys,
    get,
    join,
)
from gpushare.scheduler.config import Config
from gpushare.scheduler.config_file import parse_actions, parse_config

#: The simulator's clock: scenario ages are measured back from it.
NOW = 0.0
VERY_LONG = 10**9

TOP_KEYS = frozenset({
    "format", "name", "about", "kind", "actions", "cycles", "stableCycles", "config",
    "nodes", "queues", "jobs", "expect", "source", "capacity",
})
NODE_KEYS = frozenset({
    "name", "gpus", "gpuMemoryMiB", "cpuMillis", "memoryMiB", "maxPods", "labels", "ready",
})
QUEUE_KEYS = frozenset({
    "name", "parent", "priority", "resources", "preemptMinRuntimeSeconds",
    "reclaimMinRuntimeSeconds", "createdSecondsAgo", "usage", "request", "allocated",
    "reservationAfterSeconds",
})
RESOURCE_KEYS = frozenset({"quota", "limit", "overQuotaWeight", "lendingLimit", "types"})
TYPE_KEYS = frozenset({"quota", "limit", "overQuotaWeight"})
JOB_KEYS = frozenset({
    "name", "namespace", "queue", "priority", "preemptibility", "minMember", "minSubGroup",
    "createdSecondsAgo", "pendingSecondsAgo", "resources", "preemptionDelaySeconds",
    "stalenessGracePeriodSeconds", "staleSeconds", "subgroups", "tasks", "preemptionPolicy",
    "expectedRuntimeSeconds",
})
POD_RESOURCE_KEYS = frozenset({"gpus", "gpuMemoryMiB", "gpuDevices", "cpuMillis", "memoryMiB"})
SUBGROUP_KEYS = frozenset({"name", "parent", "minMember", "minSubGroup"})
TASK_KEYS = frozenset({
    "name", "state", "node", "gpuGroups", "subgroup", "runningSeconds", "priority",
    "resources", "nodeSelector", "nodeAffinity", "taskOrder",
})
EXPECT_KEYS = frozenset({"tasks", "jobs", "queues", "reservations"})
EXPECT_POD_KEYS = frozenset({"status", "node", "gpus"})
EXPECT_QUEUE_KEYS = frozenset({"fairShare", "gpuTypeFairShare"})
STATES = tuple(s.value for s in PodStatus)


@dataclass(slots=True)
class PodExpectation:
    status: str | None = None
    node: str | None = None
    gpus: Fraction | None = None
    has_node: bool = False  # `node` was written (null means "no node")


@dataclass(slots=True)
class Expectations:
    tasks: dict[str, PodExpectation] = field(default_factory=dict)
    jobs: dict[str, PodExpectation] = field(default_factory=dict)
    queues: dict[str, dict[str, Fraction]] = field(default_factory=dict)  # fairShare, MiB memory
    #: Queue -> GPU type -> fair share there (``gpuTypeFairShare``).
    gpu_types: dict[str, dict[str, Fraction]] = field(default_factory=dict)
    #: Job name -> the nodes reserved for it, in name order (None: no reservation).
    reservations: dict[str, list[str] | None] = field(default_factory=dict)


@dataclass(slots=True)
class Scenario:
    name: str
    path: str
    kind: str
    config: Config
    cycles: int
    stable_cycles: int
    nodes: list[Node] = field(default_factory=list)
    queues: list[Queue] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)
    pods: list[Pod] = field(default_factory=list)
    pod_groups: dict[str, list[str]] = field(default_factory=dict)  # pod key -> gpuGroups
    pod_paths: dict[str, str] = field(default_factory=dict)  # pod key -> its path in the file
    expect: Expectations = field(default_factory=Expectations)
    # kind: fairshare
    capacity: dict[str, Fraction] = field(default_factory=dict)
    requests: dict[str, dict[str, Fraction]] = field(default_factory=dict)


def load_file(path: str | Path) -> Scenario:
    text = Path(path).read_text()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ScenarioError("", f"not valid YAML: {err}") from None
    return parse(data, str(path))


def parse(data: Any, path: str = "<scenario>") -> Scenario:
    top = check_keys(data, "", TOP_KEYS)
    fmt = get(top, "format", "", as_int, default=1)
    if fmt != 1:
        raise ScenarioError("format", f"only format 1 is understood, got {fmt}")
    name = get(top, "name", "", as_str)
    if name is None:
        raise ScenarioError("name", "required")
    kind = get(top, "kind", "", as_str, default="cycle", choices=("cycle", "fairshare"))
    config = parse_config(top.get("config"), parse_actions(top))
    sc = Scenario(
        name=name,
        path=path,
        kind=kind,
        config=config,
        cycles=get(top, "cycles", "", as_int, default=1, minimum=0),
        stable_cycles=get(top, "stableCycles", "", as_int, default=0, minimum=0),
    )
    memory_of = {}
    for i, raw in enumerate(as_list(top.get("nodes"), "nodes")):
        node = _node(raw, join("nodes", i))
        if node.name in memory_of:
            raise ScenarioError(join(join("nodes", i), "name"), f"duplicate node {node.name!r}")
        memory_of[node.name] = node.gpu_memory_mib
        sc.nodes.append(node)
    queue_names: set[str] = set()
    for i, raw in enumerate(as_list(top.get("queues"), "queues")):
        queue, request = _queue(raw, join("queues", i), kind, config.kai)
        if queue.name in queue_names:
            raise ScenarioError(join(join("queues", i), "name"), f"duplicate queue {queue.name!r}")
        queue_names.add(queue.name)
        sc.queues.append(queue)
        if request is not None:
            sc.requests[queue.name] = request
    for i, q in enumerate(sc.queues):
        if q.parent is not None and q.parent not in queue_names:
            raise ScenarioError(join(join("queues", i), "parent"), f"unknown queue {q.parent!r}")
    if kind == "fairshare":
        cap = check_keys(top.get("capacity"), "capacity", frozenset(RESOURCES))
        sc.capacity = {
            GPU: as_number(cap.get(GPU, 0), "capacity.gpu", 0),
            CPU: as_number(cap.get(CPU, 0), "capacity.cpu", 0),
            MEMORY: as_number(cap.get(MEMORY, 0), "capacity.memory", 0) * MIB,
        }
    elif "capacity" in top:
        raise ScenarioError("capacity", "only for kind: fairshare")
    task_names: set[str] = set()
    for i, raw in enumerate(as_list(top.get("jobs"), "jobs")):
        _job(raw, join("jobs", i), sc, queue_names, memory_of, task_names)
    sc.expect = _expect(top.get("expect"), "expect")
    return sc


def _node(raw: Any, path: str) -> Node:
    n = check_keys(raw, path, NODE_KEYS)
    name = get(n, "name", path, as_str)
    if name is None:
        raise ScenarioError(join(path, "name"), "required")
    memory = get(n, "memoryMiB", path, as_number, default=Fraction(262144), minimum=0)
    return Node(
        name=name,
        gpus=get(n, "gpus", path, as_int, default=0, minimum=0),
        gpu_memory_mib=get(n, "gpuMemoryMiB", path, as_int, default=81920, minimum=0),
        cpu_millis=get(n, "cpuMillis", path, as_int, default=64000, minimum=0),
        memory_bytes=mib_to_bytes(memory),
        max_pods=get(n, "maxPods", path, as_int, default=110, minimum=0),
        labels=as_str_map(n.get("labels"), join(path, "labels")),
        ready=get(n, "ready", path, as_bool, default=True),
    )


def _quantity(resource: str, value: Fraction) -> Fraction:
    """A queue figure in natural units (memory MiB -> bytes); -1 stays unlimited."""
    if value == UNLIMITED:
        return UNLIMITED
    return value * MIB if resource == MEMORY else value


def _resources_of(raw: Any, path: str) -> dict[str, Fraction]:
    m = check_keys(raw, path, frozenset(RESOURCES))
    return {r: _quantity(r, as_number(v, join(path, r), 0)) for r, v in m.items()}


def _queue(raw: Any, path: str, kind: str,
           kai: bool = False) -> tuple[Queue, dict[str, Fraction] | None]:
    q = check_keys(raw, path, QUEUE_KEYS)
    name = get(q, "name", path, as_str)
    if name is None:
        raise ScenarioError(join(path, "name"), "required")
    resources: dict[str, ResourceSpec] = {}
    gpu_types: dict[str, ResourceSpec] = {}
    res_block = check_keys(q.get("resources"), join(path, "resources"), frozenset(RESOURCES))
    for r in RESOURCES:
        rpath = join(join(path, "resources"), r)
        if r not in res_block:
            resources[r] = ResourceSpec(Fraction(0), UNLIMITED, Fraction(1))
            continue
        spec = check_keys(res_block[r], rpath, RESOURCE_KEYS)
        quota = get(spec, "quota", rpath, as_number, default=Fraction(0), minimum=-1)
        limit = get(spec, "limit", rpath, as_number, default=UNLIMITED, minimum=-1)
        weight = get(spec, "overQuotaWeight", rpath, as_number, default=Fraction(1), minimum=0)
        for key, value in (("quota", quota), ("limit", limit)):
            if value < 0 and value != UNLIMITED:
                raise ScenarioError(join(rpath, key), f"must be -1 or at least 0, got {value}")
        lending = _lending_limit(spec, rpath, quota, kai)
        if spec.get("types") is not None:
            if r != GPU:
                raise ScenarioError(join(rpath, "types"), "only for gpu")
            gpu_types = _gpu_types(spec["types"], join(rpath, "types"), kai)
        resources[r] = ResourceSpec(_quantity(r, quota), _quantity(r, limit), weight,
                                    None if lending is None else _quantity(r, lending))
    usage = {}
    if "usage" in q:
        u = check_keys(q["usage"], join(path, "usage"), frozenset(RESOURCES))
        usage = {r: float(as_number(v, join(join(path, "usage"), r), 0)) for r, v in u.items()}
    request = None
    for key in ("request", "allocated"):
        if key in q and kind != "fairshare":
            raise ScenarioError(join(path, key), "only for kind: fairshare")
    if "request" in q:
        request = _resources_of(q["request"], join(path, "request"))
    if "allocated" in q:
        _resources_of(q["allocated"], join(path, "allocated"))
    queue = Queue(
        name=name,
        parent=as_opt_str(q.get("parent"), join(path, "parent")),
        priority=get(q, "priority", path, as_int, default=100),
        resources=resources,
        preempt_min_runtime=float(
            get(q, "preemptMinRuntimeSeconds", path, as_number, default=Fraction(0), minimum=0)
        ),
        reclaim_min_runtime=float(
            get(q, "reclaimMinRuntimeSeconds", path, as_number, default=Fraction(0), minimum=0)
        ),
        created_at=NOW - float(get(q, "createdSecondsAgo", path, as_number, default=Fraction(0))),
        usage=usage,
        reservation_after=_opt_seconds(q, "reservationAfterSeconds", path, minimum=-1),
        gpu_types=gpu_types,
    )
    return queue, request


def _gpu_types(raw: Any, path: str, kai: bool) -> dict[str, ResourceSpec]:
    """``resources.gpu.types``: quota, limit and over-quota weight per GPU type, keyed by
    the type's short name or its ``nvidia.com/gpu.product`` value; refused under
    ``compat: kai`` (KAI has no per-type quota)."""
    if kai:
        raise ScenarioError(path, "not available under compat: kai (KAI has no per-GPU-type "
                                  "quota)")
    block = check_keys(raw, path, frozenset(raw or {}) if isinstance(raw, dict) else frozenset())
    out: dict[str, ResourceSpec] = {}
    for key, entry in block.items():
        tpath = join(path, key)
        kind = gpu_type_name(key)
        if kind in out:
            raise ScenarioError(tpath, f"GPU type {kind} given twice")
        spec = check_keys(entry, tpath, TYPE_KEYS)
        quota = get(spec, "quota", tpath, as_number, default=Fraction(0))
        limit = get(spec, "limit", tpath, as_number, default=UNLIMITED)
        weight = get(spec, "overQuotaWeight", tpath, as_number, default=Fraction(1))
        problem = gpu_type_error(quota, limit, weight)
        if problem is not None:
            raise ScenarioError(join(tpath, problem[0]), problem[1])
        out[kind] = ResourceSpec(quota, limit, weight)
    return out


def _lending_limit(spec: dict[str, Any], rpath: str, quota: Fraction,
                   kai: bool) -> Fraction | None:
    """A resource's ``lendingLimit`` (None: unset), checked against its quota; refused
    under ``compat: kai`` (KAI has no such field)."""
    if spec.get("lendingLimit") is None:
        return None
    lpath = join(rpath, "lendingLimit")
    if kai:
        raise ScenarioError(lpath, "not available under compat: kai (KAI has no lending limit)")
    lending = as_number(spec["lendingLimit"], lpath)
    problem = lending_limit_error(quota, lending)
    if problem is not None:
        raise ScenarioError(lpath, problem)
    return lending


@dataclass(slots=True)
class _PodResources:
    gpus: Fraction = Fraction(0)
    gpu_memory_mib: int = 0
    gpu_devices: int = 1
    cpu_millis: int = 0
    memory_mib: Fraction = Fraction(0)


def _pod_resources(raw: Any, path: str, base: _PodResources) -> _PodResources:
    m = check_keys(raw, path, POD_RESOURCE_KEYS)
    out = _PodResources(
        gpus=get(m, "gpus", path, as_number, default=base.gpus, minimum=0),
        gpu_memory_mib=get(m, "gpuMemoryMiB", path, as_int, default=base.gpu_memory_mib,
                           minimum=0),
        gpu_devices=get(m, "gpuDevices", path, as_int, default=base.gpu_devices, minimum=1),
        cpu_millis=get(m, "cpuMillis", path, as_int, default=base.cpu_millis, minimum=0),
        memory_mib=get(m, "memoryMiB", path, as_number, default=base.memory_mib, minimum=0),
    )
    if "gpus" in m and out.gpus > 1 and out.gpus.denominator != 1:
        raise ScenarioError(join(path, "gpus"), "whole GPUs or a fraction below 1")
    if "gpuMemoryMiB" in m and "gpus" in m and out.gpus and out.gpu_memory_mib:
        raise ScenarioError(join(path, "gpuMemoryMiB"), "either gpus or gpuMemoryMiB, not both")
    return out


def _gpu_request(res: _PodResources, path: str) -> GpuRequest:
    if res.gpu_memory_mib and res.gpus:
        raise ScenarioError(path, "either gpus or gpuMemoryMiB, not both")
    if res.gpu_memory_mib:
        return GpuRequest(memory_mib=res.gpu_memory_mib, devices=res.gpu_devices)
    if 0 < res.gpus < 1:
        milli = res.gpus * MILLI
        if milli.denominator != 1:
            raise ScenarioError(join(path, "gpus"), "fractions are counted in thousandths")
        return GpuRequest(portion=int(milli), devices=res.gpu_devices)
    return GpuRequest(whole=int(res.gpus))


def _job(raw: Any, path: str, sc: Scenario, queues: set[str], memory_of: dict[str, int],
         task_names: set[str]) -> None:
    j = check_keys(raw, path, JOB_KEYS)
    job, base, tasks = _job_of(j, path, queues)
    sc.jobs.append(job)
    for i, traw in enumerate(tasks):
        _task(traw, join(join(path, "tasks"), i), i, job, base, sc, memory_of, task_names)


def _job_of(j: dict[str, Any], path: str,
            queues: set[str]) -> tuple[Job, _PodResources, list[Any]]:
    """The job of a checked ``jobs[i]`` entry, the resources its tasks start from, and its
    raw tasks."""
    name = get(j, "name", path, as_str)
    if name is None:
        raise ScenarioError(join(path, "name"), "required")
    queue = get(j, "queue", path, as_str)
    if queue is None:
        raise ScenarioError(join(path, "queue"), "required")
    if queue not in queues:
        raise ScenarioError(join(path, "queue"), f"unknown queue {queue!r}")
    namespace = get(j, "namespace", path, as_str, default="default")
    priority = get(j, "priority", path, as_int, default=50)
    preemptibility = get(j, "preemptibility", path, as_str, default=None,
                         choices=("preemptible", "non-preemptible", "semi-preemptible"))
    preemptible = (priority < 100 if preemptibility is None
                   else preemptibility != "non-preemptible")
    policy = get(j, "preemptionPolicy", path, as_str, default="PreemptLowerPriority",
                 choices=("PreemptLowerPriority", "Never"))
    base = _pod_resources(j.get("resources"), join(path, "resources"), _PodResources())
    tasks = as_list(j.get("tasks"), join(path, "tasks"))
    subgroups = _subgroups(j, path)
    # With subgroups the tree is the gang; a job-level minMember is then only informative.
    grace = j.get("stalenessGracePeriodSeconds")
    job = Job(
        name=name,
        namespace=namespace,
        queue=queue,
        priority=priority,
        preemptible=preemptible,
        semi_preemptible=preemptibility == "semi-preemptible",
        min_member=get(j, "minMember", path, as_int, default=len(tasks), minimum=0),
        min_subgroup=get(j, "minSubGroup", path, as_int, default=None, minimum=0),
        created_at=NOW - float(get(j, "createdSecondsAgo", path, as_number, default=Fraction(0))),
        preemption_delay=float(
            get(j, "preemptionDelaySeconds", path, as_number, default=Fraction(0), minimum=0)
        ),
        may_preempt=policy != "Never",
        staleness_grace=None if grace is None else float(
            as_number(grace, join(path, "stalenessGracePeriodSeconds"))
        ),
        stale_since=None if "staleSeconds" not in j else NOW - float(
            as_number(j["staleSeconds"], join(path, "staleSeconds"), 0)
        ),
        subgroups=subgroups,
        expected_runtime=_opt_seconds(j, "expectedRuntimeSeconds", path, minimum=0),
        pending_since=None if "pendingSecondsAgo" not in j else NOW - float(
            as_number(j["pendingSecondsAgo"], join(path, "pendingSecondsAgo"), 0)
        ),
    )
    return job, base, tasks


def _opt_seconds(m: dict[str, Any], key: str, path: str, minimum: int) -> float | None:
    value = get(m, key, path, as_number, default=None, minimum=minimum)
    return None if value is None else float(value)


def _subgroups(j: dict[str, Any], path: str) -> dict[str, SubGroup]:
    """A job's subgroup tree: each subgroup by name, its children filled in."""
    subgroups: dict[str, SubGroup] = {}
    for i, sraw in enumerate(as_list(j.get("subgroups"), join(path, "subgroups"))):
        spath = join(join(path, "subgroups"), i)
        s = check_keys(sraw, spath, SUBGROUP_KEYS)
        sname = get(s, "name", spath, as_str)
        if sname is None:
            raise ScenarioError(join(spath, "name"), "required")
        subgroups[sname] = SubGroup(
            name=sname,
            parent=as_opt_str(s.get("parent"), join(spath, "parent")),
            min_member=get(s, "minMember", spath, as_int, default=None, minimum=0),
            min_subgroup=get(s, "minSubGroup", spath, as_int, default=None, minimum=0),
        )
    for i, sg in enumerate(subgroups.values()):
        if sg.parent is not None:
            if sg.parent not in subgroups:
                raise ScenarioError(join(join(join(path, "subgroups"), i), "parent"),
                                    f"unknown subgroup {sg.parent!r}")
            subgroups[sg.parent].children.append(sg.name)
    return subgroups


def _task(traw: Any, tpath: str, i: int, job: Job, base: _PodResources, sc: Scenario,
          memory_of: dict[str, int], task_names: set[str]) -> None:
    """Task ``i`` of ``job``: its pod, with its GPU groups and path, into the scenario."""
    t = check_keys(traw, tpath, TASK_KEYS)
    tname = get(t, "name", tpath, as_str, default=f"{job.name}-{i}")
    if tname in task_names:
        raise ScenarioError(join(tpath, "name"), f"duplicate task {tname!r}")
    task_names.add(tname)
    state = get(t, "state", tpath, as_str, default="Pending", choices=STATES)
    status = PodStatus(state)
    node = _task_node(t, tpath, state, status, memory_of)
    res = _pod_resources(t.get("resources"), join(tpath, "resources"), base)
    gpu = _gpu_request(res, join(tpath, "resources"))
    subgroup = _task_subgroup(t, tpath, job.subgroups)
    groups = [
        str(as_str(str(g), join(join(tpath, "gpuGroups"), k)))
        for k, g in enumerate(as_list(t.get("gpuGroups"), join(tpath, "gpuGroups")))
    ]
    running = get(t, "runningSeconds", tpath, as_number, default=Fraction(VERY_LONG), minimum=0)
    pod = Pod(
        name=tname,
        namespace=job.namespace,
        job=job.key,
        index=i,
        gpu=gpu,
        cpu_millis=res.cpu_millis,
        memory_bytes=mib_to_bytes(res.memory_mib),
        status=status,
        node=node,
        started_at=NOW - float(running),
        priority=get(t, "priority", tpath, as_int, default=None),
        node_selector=as_str_map(t.get("nodeSelector"), join(tpath, "nodeSelector")),
        node_affinity=_affinity(t.get("nodeAffinity"), join(tpath, "nodeAffinity")),
        task_order=get(t, "taskOrder", tpath, as_int, default=None),
        subgroup=subgroup,
    )
    sc.pods.append(pod)
    sc.pod_groups[pod.key] = groups
    sc.pod_paths[pod.key] = tpath


def _task_node(t: dict[str, Any], tpath: str, state: str, status: PodStatus,
               memory_of: dict[str, int]) -> str | None:
    """The node a task's pod holds: none while pending, required while it runs."""
    node = as_opt_str(t.get("node"), join(tpath, "node"))
    if node is not None and node not in memory_of:
        raise ScenarioError(join(tpath, "node"), f"unknown node {node!r}")
    if status in (PodStatus.PENDING,):
        return None  # a pending pod holds nothing, wherever it was
    if node is None and status not in (PodStatus.SUCCEEDED, PodStatus.FAILED):
        raise ScenarioError(join(tpath, "node"), f"required for a {state} pod")
    return node


def _task_subgroup(t: dict[str, Any], tpath: str,
                   subgroups: dict[str, SubGroup]) -> str | None:
    """The leaf subgroup a task's pod joins, if any."""
    subgroup = as_opt_str(t.get("subgroup"), join(tpath, "subgroup"))
    if subgroup is not None:
        if subgroup not in subgroups:
            raise ScenarioError(join(tpath, "subgroup"), f"unknown subgroup {subgroup!r}")
        if subgroups[subgroup].children:
            raise ScenarioError(join(tpath, "subgroup"), "pods join leaf subgroups only")
    return subgroup


def _pod_expectation(raw: Any, path: str) -> PodExpectation:
    e = check_keys(raw, path, EXPECT_POD_KEYS)
    status = get(e, "status", path, as_str, default=None, choices=STATES)
    return PodExpectation(
        status=status,
        node=as_opt_str(e.get("node"), join(path, "node")),
        gpus=get(e, "gpus", path, as_number, default=None, minimum=0),
        has_node="node" in e,
    )


def _affinity(raw: Any, path: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``nodeAffinity``: label -> the values a node's label may take (required ``In``)."""
    if raw is None:
        return ()
    block = check_keys(raw, path, frozenset(raw) if isinstance(raw, dict) else frozenset())
    out = []
    for key, values in sorted(block.items()):
        vpath = join(path, key)
        items = [as_str(v, join(vpath, i)) for i, v in enumerate(as_list(values, vpath))]
        if not items:
            raise ScenarioError(vpath, "needs at least one value")
        out.append((key, tuple(items)))
    return tuple(out)


def _expect(raw: Any, path: str) -> Expectations:
    e = check_keys(raw, path, EXPECT_KEYS)
    out = Expectations()
    for section in ("tasks", "jobs"):
        spath = join(path, section)
        items = check_keys(e.get(section), spath, frozenset(e.get(section) or {}))
        for name, item in items.items():
            getattr(out, section)[name] = _pod_expectation(item, join(spath, name))
    qpath = join(path, "queues")
    queues = check_keys(e.get("queues"), qpath, frozenset(e.get("queues") or {}))
    for name, item in queues.items():
        q = check_keys(item, join(qpath, name), EXPECT_QUEUE_KEYS)
        fpath = join(join(qpath, name), "fairShare")
        fair = check_keys(q.get("fairShare"), fpath, frozenset(RESOURCES))
        out.queues[name] = {r: as_number(v, join(fpath, r)) for r, v in fair.items()}
        tpath = join(join(qpath, name), "gpuTypeFairShare")
        raw_types = q.get("gpuTypeFairShare")
        if raw_types is not None:
            typed = check_keys(raw_types, tpath,
                               frozenset(raw_types) if isinstance(raw_types, dict) else frozenset())
            out.gpu_types[name] = {gpu_type_name(k): as_number(v, join(tpath, k))
                                   for k, v in typed.items()}
    rpath = join(path, "reservations")
    held = check_keys(e.get("reservations"), rpath, frozenset(e.get("reservations") or {}))
    for name, nodes in held.items():
        out.reservations[name] = None if nodes is None else [
            as_str(n, join(join(rpath, name), i)) for i, n in enumerate(
                as_list(nodes, join(rpath, name)))]
    return out
