"""Running scenarios: build the state, run cycles with settling, compare with ``expect``."""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from gpushare.model.pod import Pod, PodStatus
from gpushare.model.quantities import CPU, GPU, MEMORY, MIB, MILLI, RESOURCES
from gpushare.model.schema import ScenarioError
from gpushare.scheduler.cycle import run_cycle
from gpushare.scheduler.decisions import CycleResult
from gpushare.scheduler.plugins.proportion.resource_division import ShareInput, divide
from gpushare.scheduler.session import Session
from gpushare.scheduler.state import ClusterState
from gpushare.simulator.scenario import NOW, PodExpectation, Scenario

TOLERANCE = 1e-6


@dataclass(slots=True)
class Snapshot:
    """What every pod and queue looked like after a cycle (the FORMAT result report)."""

    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    queues: dict[str, dict[str, float]] = field(default_factory=dict)


@dataclass(slots=True)
class ScenarioResult:
    name: str
    path: str
    snapshot: Snapshot
    mismatches: list[str] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)
    #: Per cycle run (stable cycles included): queue -> (GPUs allocated, GPU fair share).
    history: list[dict[str, tuple[float, float]]] = field(default_factory=list)
    #: Queue -> GPUs allocated before the first cycle.
    start: dict[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.mismatches

    def report(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "tasks": self.snapshot.tasks,
            "queues": {q: {"fairShare": f} for q, f in self.snapshot.queues.items()},
            "passed": self.passed,
            "mismatches": self.mismatches,
            "pendingReasons": self.reasons,
        }


# ---------------------------------------------------------------- building
def build_state(sc: Scenario) -> ClusterState:
    state = ClusterState()
    for node in sc.nodes:
        state.upsert_node(node)
    for queue in _parents_first(sc):
        state.upsert_queue(queue)
    for job in sc.jobs:
        state.upsert_job(job)
    _assign_gpus(sc, state)
    for pod in sc.pods:
        state.upsert_pod(pod)
    return state


def _parents_first(sc: Scenario) -> list:
    done: set[str] = set()
    out = []
    by_name = {q.name: q for q in sc.queues}

    def visit(name: str) -> None:
        if name in done:
            return
        done.add(name)
        q = by_name[name]
        if q.parent in by_name:
            visit(q.parent)
        out.append(q)

    for q in sc.queues:
        visit(q.name)
    return out


def _assign_gpus(sc: Scenario, state: ClusterState) -> None:
    """Map ``gpuGroups`` names onto physical GPU indices, and give placed whole-GPU pods
    their GPUs. A group named by a free index (``"1"``) takes that GPU."""
    on_node: dict[str, list[Pod]] = {}
    for pod in sc.pods:
        if pod.node is not None and pod.status not in (PodStatus.SUCCEEDED, PodStatus.FAILED):
            on_node.setdefault(pod.node, []).append(pod)
    for node_name, pods in on_node.items():
        node = state.nodes[node_name]
        usage = state.usage[node_name]
        taken: dict[int, str] = {}
        index_of: dict[str, int] = {}
        names: list[str] = []
        for pod in pods:
            if pod.gpu.is_shared:
                groups = sc.pod_groups.get(pod.key) or []
                if len(groups) < pod.gpu.devices:
                    groups = groups + [f"{pod.name}#{k}" for k in range(len(groups),
                                                                          pod.gpu.devices)]
                    sc.pod_groups[pod.key] = groups
                for g in groups:
                    if g not in names:
                        names.append(g)
        for g in names:
            if g.isdigit() and int(g) < node.gpus and int(g) not in taken:
                taken[int(g)] = g
                index_of[g] = int(g)
        free = [i for i in range(node.gpus) if i not in taken]
        for g in names:
            if g in index_of:
                continue
            if not free:
                raise ScenarioError(sc.pod_paths.get(pods[0].key, ""),
                                    f"node {node_name} has too few GPUs for its shared groups")
            index_of[g] = free.pop(0)
            taken[index_of[g]] = g
        for pod in pods:
            if pod.gpu.is_shared:
                pod.gpu_indices = tuple(index_of[g] for g in sc.pod_groups[pod.key])
                pod.portion = pod.gpu.portion_on(node.gpu_memory_mib)
            elif pod.gpu.whole:
                if len(free) < pod.gpu.whole:
                    raise ScenarioError(sc.pod_paths[pod.key],
                                        f"node {node_name} has too few free GPUs for this pod")
                pod.gpu_indices = tuple(free[: pod.gpu.whole])
                del free[: pod.gpu.whole]
                pod.portion = MILLI
        usage.gpu_names = {i: g for i, g in taken.items()}


# ----------------------------------------------------------------- running
def settle(state: ClusterState, now: float) -> None:
    """What happens between cycles: binds finish, evicted pods come back Pending, pipelined
    pods are decided afresh."""
    for key in sorted(state.pods):
        pod = state.pods[key]
        if pod.status is PodStatus.BINDING:
            state.set_pod(pod, PodStatus.RUNNING, pod.node, pod.gpu_indices, pod.portion)
            pod.started_at = now
        elif pod.status in (PodStatus.RELEASING, PodStatus.PIPELINED):
            pod.evict_reason = pod.evict_action = ""
            state.set_pod(pod, PodStatus.PENDING)


def snapshot(sc: Scenario, state: ClusterState, session_fair: dict[str, tuple]) -> Snapshot:
    snap = Snapshot()
    for pod in sc.pods:
        p = state.pods[pod.key]
        usage = state.usage.get(p.node) if p.node else None
        groups = []
        if p.gpu_indices and p.gpu.is_shared and usage is not None:
            groups = [usage.gpu_names.get(i, str(i)) for i in p.gpu_indices]
        snap.tasks[p.name] = {
            "status": p.status.value,
            "node": p.node,
            "gpus": p.gpu.reported_gpus(),
            "gpuGroups": groups,
        }
    for name in sorted(session_fair):
        g, c, m = session_fair[name]
        snap.queues[name] = {"gpu": float(g), "cpu": float(c), "memory": float(m / MIB)}
    return snap


def run(sc: Scenario) -> ScenarioResult:
    if sc.kind == "fairshare":
        return _run_fairshare(sc)
    state = build_state(sc)
    result = None
    fair: dict[str, tuple] = {}
    reasons: dict[str, str] = {}
    mismatches: list[str] = []
    history: list[dict[str, tuple[float, float]]] = []
    start = {q: float(u.allocated.gpu) / MILLI for q, u in state.queue_usage.items()}
    snap = Snapshot()
    for c in range(sc.cycles):
        if c:
            settle(state, NOW)
        result = run_cycle(state, sc.config, NOW)
        history.append(_gpu_figures(result))
        fair = {q: (r.fair_share["gpu"], r.fair_share["cpu"],
                    Fraction(str(r.fair_share["memory"])) * MIB)
                for q, r in result.queues.items()}
        reasons = dict(result.pending_reasons)
    if not sc.cycles:
        fair = dict(Session(state, sc.config, NOW).proportion.fair_share)
    snap = snapshot(sc, state, fair)
    mismatches += [f"after cycle {sc.cycles}: {m}" for m in compare(sc, state, snap)]
    for s in range(sc.stable_cycles):
        settle(state, NOW)
        result = run_cycle(state, sc.config, NOW)
        history.append(_gpu_figures(result))
        fair = {q: (r.fair_share["gpu"], r.fair_share["cpu"],
                    Fraction(str(r.fair_share["memory"])) * MIB)
                for q, r in result.queues.items()}
        reasons = dict(result.pending_reasons)
        snap = snapshot(sc, state, fair)
        mismatches += [
            f"after stable cycle {s + 1}: {m}" for m in compare(sc, state, snap)
        ]
    return ScenarioResult(sc.name, sc.path, snap, mismatches, reasons, history, start)


def _gpu_figures(result: CycleResult) -> dict[str, tuple[float, float]]:
    return {q: (float(r.allocated["gpu"]), float(r.fair_share["gpu"]))
            for q, r in result.queues.items()}


def _run_fairshare(sc: Scenario) -> ScenarioResult:
    inputs = [
        ShareInput(
            name=q.name,
            parent=q.parent,
            priority=q.priority,
            created_at=q.created_at,
            quota={r: q.resources[r].quota for r in RESOURCES},
            limit={r: q.resources[r].limit for r in RESOURCES},
            weight={r: q.resources[r].over_quota_weight for r in RESOURCES},
            request=sc.requests.get(q.name, {}),
            usage={r: Fraction(str(v)) for r, v in q.usage.items()},
            kept=None if sc.config.kai else q.kept_quota(),
        )
        for q in sc.queues
    ]
    shares = divide(sc.capacity, inputs, sc.config.k_value, sc.config.fairshare_mode)
    snap = Snapshot()
    for name in sorted(shares):
        s = shares[name]
        snap.queues[name] = {"gpu": float(s[GPU]), "cpu": float(s[CPU]),
                             "memory": float(s[MEMORY] / MIB)}
    mismatches = _compare_queues(sc, snap)
    return ScenarioResult(sc.name, sc.path, snap, mismatches)


# --------------------------------------------------------------- comparing
def _close(a: float, b: float) -> bool:
    return abs(a - b) <= TOLERANCE * max(1.0, abs(a), abs(b))


def _compare_queues(sc: Scenario, snap: Snapshot) -> list[str]:
    out = []
    for name, fair in sorted(sc.expect.queues.items()):
        got = snap.queues.get(name)
        if got is None:
            out.append(f"queue {name}: not in the scenario's result")
            continue
        for r, want in sorted(fair.items()):
            want_f = float(want)
            if not _close(got[r], want_f):
                out.append(f"queue {name}: fairShare.{r} is {got[r]:g}, expected {want_f:g}")
    return out


def _compare_gpu_types(sc: Scenario, state: ClusterState) -> list[str]:
    """``gpuTypeFairShare``: the per-type fair shares a session opened on the final state
    divides."""
    if not sc.expect.gpu_types:
        return []
    types = Session(state, sc.config, NOW).proportion.gpu_types
    out = []
    for name, want in sorted(sc.expect.gpu_types.items()):
        got = {} if types is None else types.report(name)
        for kind, amount in sorted(want.items()):
            if kind not in got:
                out.append(f"queue {name}: gpuTypeFairShare.{kind}: no queue has that type")
            elif not _close(got[kind], float(amount)):
                out.append(f"queue {name}: gpuTypeFairShare.{kind} is {got[kind]:g}, "
                           f"expected {float(amount):g}")
    return out


def _compare_pod(label: str, got: dict[str, Any], want: PodExpectation) -> list[str]:
    out = []
    if want.status is not None and got["status"] != want.status:
        out.append(f"{label}: status is {got['status']}, expected {want.status}")
    if want.has_node and got["node"] != want.node:
        out.append(f"{label}: node is {got['node']}, expected {want.node}")
    return out


def compare(sc: Scenario, state: ClusterState, snap: Snapshot) -> list[str]:
    out: list[str] = []
    for name, want in sorted(sc.expect.tasks.items()):
        got = snap.tasks.get(name)
        if got is None:
            out.append(f"task {name}: not in the scenario")
            continue
        out += _compare_pod(f"task {name}", got, want)
        if want.gpus is not None and not _close(got["gpus"], float(want.gpus)):
            out.append(f"task {name}: gpus is {got['gpus']:g}, expected {float(want.gpus):g}")
    jobs_by_name: dict[str, list[Pod]] = {}
    for pod in sc.pods:
        job_name = pod.job.split("/", 1)[1]
        jobs_by_name.setdefault(job_name, []).append(pod)
    for name, want in sorted(sc.expect.jobs.items()):
        pods = jobs_by_name.get(name)
        if pods is None:
            out.append(f"job {name}: not in the scenario")
            continue
        for pod in pods:
            out += _compare_pod(f"job {name} pod {pod.name}", snap.tasks[pod.name], want)
        if want.gpus is not None:
            total = sum(snap.tasks[p.name]["gpus"] for p in pods)
            if not _close(total, float(want.gpus)):
                out.append(f"job {name}: gpus is {total:g}, expected {float(want.gpus):g}")
    out += _compare_queues(sc, snap)
    out += _compare_gpu_types(sc, state)
    out += _compare_reservations(sc, state)
    return out


def _compare_reservations(sc: Scenario, state: ClusterState) -> list[str]:
    out: list[str] = []
    keys = {job.name: job.key for job in sc.jobs}
    for name, want in sorted(sc.expect.reservations.items()):
        key = keys.get(name)
        if key is None:
            out.append(f"reservation of {name}: no such job in the scenario")
            continue
        held = state.reservations.get(key)
        got = None if held is None else list(held.nodes)
        if got != want:
            out.append(f"reservation of {name}: {got}, expected {want}")
    return out
