"""Placement: which node and which GPUs a pod goes to, and placing a whole gang step.

Node choice sums scores in separate bands, so it is effectively lexicographic (as KAI):
a node with a shared GPU the fraction fits on (10^4, under GPU binpack) > a node where the
pod fits right now rather than after releases (10^3) > a GPU-less node for a CPU-only pod
(10) > binpack / spread (0..9) > node name. GPU choice inside the node: gpupack takes the
fullest fitting shared GPU first, gpuspread the emptiest; a whole free GPU starts a new
shared GPU. The fragmentation rules (``fgd``, ``fragmentation``) choose node and GPU in
``frag_placement``.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from gpushare.model.job import Job
from gpushare.model.node import TAINTS_LABEL, Node
from gpushare.model.pod import Pod, PodStatus
from gpushare.model.quantities import MILLI
from gpushare.scheduler.frag_placement import Choice, best_choice, ordered_choices
from gpushare.scheduler.gang import is_gang
from gpushare.scheduler.node_index import NodeIndex
from gpushare.scheduler.placement_registry import placement_strategy
from gpushare.scheduler.session import Session
from gpushare.scheduler.state import NodeUsage, Statement

SCORE_GPU_SHARING = 10_000
SCORE_AVAILABLE = 1_000
SCORE_RESOURCE_TYPE = 10


@dataclass(slots=True)
class Fit:
    """Where a pod can go on one node."""

    node: str
    now: bool  # everything it needs is free now (bind), else it waits for releases (pipeline)
    gpu_indices: tuple[int, ...]
    portion: int  # milli-GPU on each of gpu_indices (1000 for whole GPUs)
    has_shared_fit: bool = False
    #: Everything it needs is free now, even when the pod is to be pipelined anyway
    #: (``pipeline_only``); None: the same as ``now``.
    available: bool | None = None

    def fits_now(self) -> bool:
        """Whether the node could take the pod now (the node-availability band)."""
        return self.now if self.available is None else self.available


def _selector_ok(pod: Pod, usage: NodeUsage) -> bool:
    return pod.matches_labels(usage.node.labels)


def fit_on_node(
    session: Session, pod: Pod, usage: NodeUsage, pipeline_only: bool = False
) -> Fit | None:
    """Whether (and how) the pod fits on the node, counting what Releasing pods will free."""
    node = usage.node
    if not node.ready or not _selector_ok(pod, usage):
        return None
    reserved = session.reserved
    if reserved.by_node and not reserved.allows(session.state, pod, node.name):
        return None
    if usage.pods_free_future() < 1:
        return None
    if pod.gpu.is_memory and not session.proportion.node_quota_allows(pod, node.gpu_memory_mib):
        return None
    if (session.proportion.gpu_types is not None
            and session.proportion.node_type_refusal(pod, node.name, node.gpu_memory_mib)):
        return None
    if pod.cpu_millis > usage.cpu_free_future() or pod.memory_bytes > usage.mem_free_future():
        return None
    now = (
        usage.pods_free_now() >= 1
        and pod.cpu_millis <= usage.cpu_free_now()
        and pod.memory_bytes <= usage.mem_free_now()
    )
    g = pod.gpu
    if g.whole:
        free_now, free_later = usage.whole_gpus_free()
        if len(free_now) + len(free_later) < g.whole:
            return None
        chosen = (free_now + free_later)[: g.whole]
        now = now and len(free_now) >= g.whole
        return _fit(node.name, now, pipeline_only, tuple(chosen), MILLI)
    if g.is_shared:
        portion = g.portion_on(node.gpu_memory_mib)
        if portion > MILLI:
            return None
        candidates = _shared_gpu_candidates(session, pod, usage, portion)
        if len(candidates) < g.devices:
            return None
        candidates.sort()
        chosen_c = candidates[: g.devices]
        now = now and all(c.fits_now for c in chosen_c)
        has_shared_fit = any(c.shared for c in candidates)
        return _fit(node.name, now, pipeline_only, tuple(sorted(c.index for c in chosen_c)),
                    portion, has_shared_fit)
    return _fit(node.name, now, pipeline_only, (), 0)


def _fit(
    node: str, now: bool, pipeline_only: bool, gpu_indices: tuple[int, ...], portion: int,
    has_shared_fit: bool = False,
) -> Fit:
    if not pipeline_only:
        return Fit(node, now, gpu_indices, portion, has_shared_fit)
    return Fit(node, False, gpu_indices, portion, has_shared_fit, available=now)


@dataclass(order=True, slots=True)
class _GpuCandidate:
    """One GPU a fraction could go on; candidates sort best first."""

    later: bool  # it would have to wait for releases (sorts first only outside compat: kai)
    order: int  # the strategy's order of the GPU's fill
    index: int
    fits_now: bool
    shared: bool  # a GPU already shared by fractions (not a whole free one)


def _shared_gpu_candidates(session: Session, pod: Pod, usage: NodeUsage, portion: int
                           ) -> list[_GpuCandidate]:
    """The node's GPUs a fraction of ``portion`` milli-GPUs fits on once releases finish.

    gpushare puts GPUs where the fraction fits now first, then by the fill of what stays.
    Under ``Behaviour.shared_fill_counts_releasing`` (KAI's gpupack / gpuspread over
    FittingGPUs), only the fill counts, and it includes the fractions being released and
    the pipelined ones; a GPU whose fractions are all being released counts as a whole
    GPU, and one that holds only pipelined fractions takes a new fraction pipelined too.
    """
    gpu_order = placement_strategy(session.config.placement_for(pod)[0]).gpu_order
    kai_fill = session.behaviour.shared_fill_counts_releasing
    out: list[_GpuCandidate] = []
    for i in range(usage.node.gpus):
        future = usage.gpu_free_future(i)
        if portion > future:
            continue
        shared = usage.gpu_shared[i] > 0
        if not shared and future != MILLI:
            continue  # held by a whole-GPU pod
        fits_now = portion <= usage.gpu_free_now(i)
        if kai_fill:
            staying = usage.gpu_used[i] - usage.gpu_rel[i]
            if shared and staying == 0 and usage.gpu_pipe[i] == 0:
                shared = False  # every fraction on it is leaving: a whole GPU being freed
            if shared and usage.gpu_used[i] == 0:
                fits_now = False  # only pipelined fractions hold it: they wait, so does this
            fill = usage.gpu_used[i] + usage.gpu_pipe[i] if shared else 0
            out.append(_GpuCandidate(False, gpu_order(fill), i, fits_now, shared))
        else:
            fill = MILLI - future if shared else 0
            out.append(_GpuCandidate(not fits_now, gpu_order(fill), i, fits_now, shared))
    return out


def _placement_scores(session: Session, pod: Pod, fits: list[tuple[Fit, NodeUsage]]) -> list[float]:
    wants_gpu = pod.gpu.wants_gpu
    gpu_placement, cpu_placement = session.config.placement_for(pod)
    strategy = placement_strategy(gpu_placement if wants_gpu else cpu_placement)

    def free_and_total(usage: NodeUsage) -> tuple[int, int]:
        if wants_gpu:
            return usage.gpus_free_future_milli(), usage.node.gpus * MILLI
        return usage.cpu_free_future(), usage.node.cpu_millis

    return strategy.scores([free_and_total(u) for _, u in fits])


def ordered_fits(
    session: Session, pod: Pod, nodes: list[str] | None = None, pipeline_only: bool = False
) -> list[Fit]:
    """Every node the pod fits on, best first."""
    fits = _ordered_fits(session, pod, nodes, pipeline_only)
    types = session.proportion.gpu_types
    job = session.state.jobs.get(pod.job)
    if types is None or job is None or not pod.gpu.wants_gpu or len(fits) < 2:
        return fits
    return types.prefer(job, pod, fits, {i: f.node for i, f in enumerate(fits)})


def _ordered_fits(
    session: Session, pod: Pod, nodes: list[str] | None, pipeline_only: bool
) -> list[Fit]:
    state = session.state
    names = nodes if nodes is not None else list(state.usage)
    if _chooses_nodes(session, pod):
        return [
            _fit_of(c)
            for c in ordered_choices(session, pod, names, pipeline_only, fit_on_node)
        ]
    fits: list[tuple[Fit, NodeUsage]] = []
    for name in names:
        usage = state.usage.get(name)
        if usage is None:
            continue
        fit = fit_on_node(session, pod, usage, pipeline_only)
        if fit is not None:
            fits.append((fit, usage))
    if not fits:
        return []
    placement = _placement_scores(session, pod, fits)
    gpu_sharing = (pod.gpu.is_shared
                   and placement_strategy(session.config.placement_for(pod)[0]).shared_gpus_first)
    by_availability = session.behaviour.availability_orders_pipelined
    scored = []
    for (fit, usage), p in zip(fits, placement, strict=True):
        score = p
        if gpu_sharing and fit.has_shared_fit:
            score += SCORE_GPU_SHARING
        if fit.fits_now() if by_availability else fit.now:
            score += SCORE_AVAILABLE
        if not pod.gpu.wants_gpu and usage.node.gpus == 0:
            score += SCORE_RESOURCE_TYPE
        scored.append((-score, fit.node, fit))
    scored.sort(key=lambda t: (t[0], t[1]))
    return [t[2] for t in scored]


def _fit_reads_queue(session: Session, pod: Pod) -> bool:
    """Whether `fit_on_node` reads the pod's queue as well as the node: the per-node quota
    check of a `gpu-memory` request. The fragmentation index keeps fits by node version,
    which a queue's usage does not move, so such pods are scored afresh. So are GPU pods
    while queues have per-GPU-type entries (the per-type limits and type preference)."""
    return pod.gpu.is_memory or (session.proportion.gpu_types is not None
                                 and pod.gpu.wants_gpu)


def best_fit(
    session: Session, pod: Pod, nodes: list[str] | None = None, pipeline_only: bool = False
) -> Fit | None:
    """The node ``ordered_fits`` would put first, found through the node index when the
    whole cluster is the choice (same order, far fewer nodes looked at)."""
    g = pod.gpu
    types = session.proportion.gpu_types
    if types is not None and g.wants_gpu and (types.may_prefer(pod)
                                              or _chooses_nodes(session, pod)):
        # The type preference orders nodes by the pod's queue, and the fragmentation
        # index keeps fits per node (the per-type limits read the queue): every node is
        # scored (:mod:`~gpushare.scheduler.plugins.proportion.gpu_types`). A pod of one
        # type follows the node index, which asks ``fit_on_node`` node by node.
        fits = ordered_fits(session, pod, nodes, pipeline_only)
        return fits[0] if fits else None
    gpu_placement, cpu_placement = session.config.placement_for(pod)
    if (nodes is None and _chooses_nodes(session, pod) and not _fit_reads_queue(session, pod)
            and not session.reserved.by_node):
        # (The fragmentation index keeps fits by node version, the same for every job:
        # with nodes reserved, fits differ by job, so they are scored afresh.)
        choice = best_choice(session, pod, pipeline_only, fit_on_node)
        return None if choice is None else _fit_of(choice)
    if nodes is not None or (g.is_shared and g.devices > 1) or g.is_memory:
        # A gpu-memory request's portion differs with each node's GPU memory, which the
        # index's per-portion order cannot follow: every node is scored for it.
        fits = ordered_fits(session, pod, nodes, pipeline_only)
        return fits[0] if fits else None
    index = NodeIndex.of(session.state, gpu_placement, cpu_placement)
    usage = session.state.usage
    by_availability = session.behaviour.availability_orders_pipelined
    want_now = not pipeline_only or by_availability

    def first(names: Iterable[str]) -> tuple[Fit | None, Fit | None]:
        """First fit now, and first fit at all, in the given order."""
        later: Fit | None = None
        for name in names:
            fit = fit_on_node(session, pod, usage[name], pipeline_only)
            if fit is None:
                continue
            if not want_now or (fit.fits_now() if by_availability else fit.now):
                return fit, later or fit
            if later is None:
                later = fit
        return None, later

    if g.whole:
        now, later = first(index.whole_candidates(g.whole))
        return now or later
    if g.is_shared:
        portion = g.portion_on(session.state.nodes[next(iter(usage))].gpu_memory_mib) if (
            g.portion == 0 and usage
        ) else g.portion
        if placement_strategy(gpu_placement).shared_gpus_first:
            now, later = first(
                n for n in index.shared_candidates(portion)
                if _has_shared_fit(session, pod, usage[n])
            )
            if now is not None:
                return now
            if later is not None:
                return later
            now, later = first(index.whole_candidates(1))
            return now or later
        now, later = first(_unique_names(heapq.merge(
            index.shared_candidate_keys(portion), index.whole_candidate_keys(1))))
        return now or later
    # CPU-only: GPU-less nodes first, fitting now first.
    now_cpu, later_cpu = first(index.cpu_candidates(False, pod.cpu_millis))
    if now_cpu is not None:
        return now_cpu
    now_gpu, later_gpu = first(index.cpu_candidates(True, pod.cpu_millis))
    return now_gpu or later_cpu or later_gpu


def _unique_names(keys: Iterable[tuple[object, ...]]) -> Iterator[str]:
    """The node names of index keys (name last) in order, each once; lazy, so that the
    walk stops at the first fitting node instead of ordering every candidate."""
    seen: set[str] = set()
    for key in keys:
        name = key[-1]
        assert isinstance(name, str)
        if name not in seen:
            seen.add(name)
            yield name


def _chooses_nodes(session: Session, pod: Pod) -> bool:
    """The pod's GPU strategy makes its own node and GPU choice (the fragmentation rules)."""
    return getattr(placement_strategy(session.config.placement_for(pod)[0]), "chooses_nodes",
                   False)


def _fit_of(c: Choice) -> Fit:
    return Fit(c.node, c.now, c.gpu_indices, c.portion, c.has_shared_fit)


def _has_shared_fit(session: Session, pod: Pod, usage: NodeUsage) -> bool:
    fit = fit_on_node(session, pod, usage, True)
    return fit is not None and fit.has_shared_fit


def place_pod(
    session: Session, stmt: Statement, pod: Pod, nodes: list[str] | None = None,
    pipeline_only: bool = False,
) -> Fit | None:
    """Place one pod on the best node (bind if it fits now, else pipeline)."""
    fit = best_fit(session, pod, nodes, pipeline_only)
    if fit is None:
        return None
    if fit.now:
        stmt.allocate(pod, fit.node, fit.gpu_indices, fit.portion)
    else:
        stmt.pipeline(pod, fit.node, fit.gpu_indices, fit.portion)
    return fit


@dataclass(slots=True)
class StepResult:
    ok: bool
    placed: int = 0  # pods placed before the first failure
    pipelined: bool = False  # some pod had to wait for releases: the whole step is pipelined
    reason: str = ""


def place_step(
    session: Session, stmt: Statement, job: Job, pods: list[Pod],
    nodes: list[str] | None = None, pipeline_only: bool = False,
) -> StepResult:
    """Try to place a gang step on the current state, all or nothing.

    On success the pods are Binding, or all Pipelined when any one of them had to wait for
    releasing capacity (a gang starts together). On failure everything done here is
    rolled back and the result says why.
    """
    cp = stmt.checkpoint()
    placed: list[tuple[Pod, Fit]] = []
    for i, pod in enumerate(pods):
        fit = place_pod(session, stmt, pod, nodes, pipeline_only)
        if fit is None:
            stmt.rollback(cp)
            return StepResult(False, i, False, _failure_reason(session, job, pod, i))
        placed.append((pod, fit))
    pipelined = any(not fit.now for _, fit in placed)
    if pipelined:
        for pod, fit in placed:
            if pod.status is PodStatus.BINDING:
                stmt.pipeline(pod, fit.node, pod.gpu_indices, pod.portion)
    return StepResult(True, len(pods), pipelined)


def _failure_reason(session: Session, job: Job, pod: Pod, placed: int) -> str:
    why = unschedulable_reason(session, pod)
    if is_gang(job) and placed < len(session.gang(job).next_step() or []) and placed >= 0:
        gang = session.gang(job)
        required = gang.min_total()
        if gang.satisfied():
            return f"Resources were not found for pod {pod.key} due to: {why}"
        return (
            f"Resources were found for {gang.active_total() + placed} pods while {required} are "
            f"required for gang scheduling. Additional pods cannot be scheduled due to: {why}"
        )
    return f"Resources were not found for pod {pod.key} due to: {why}"


def _selector_reason(pod: Pod, node: Node) -> str:
    """Why the node's labels keep the pod off: an untolerated taint (named as
    kube-scheduler names it, ``{key: value}``), else the pod's selector or affinity."""
    taints = node.labels.get(TAINTS_LABEL, "")
    own = [(k, v) for k, v in pod.node_affinity if k != TAINTS_LABEL]
    selector_ok = all(node.labels.get(k) == v for k, v in pod.node_selector.items()) and all(
        node.labels.get(k) in values for k, values in own)
    if selector_ok and taints:
        key, _, rest = taints.split(",")[0].partition("=")
        value = rest.rpartition(":")[0]
        return f"had untolerated taint {{{key}: {value}}}"
    return "didn't match Pod's node affinity/selector"


def unschedulable_reason(session: Session, pod: Pod) -> str:
    """Why no node takes the pod, summarised over the nodes.

    Nodes the index rules out by GPUs (or CPU) are counted in bulk; only the few that
    could hold the pod's GPUs are looked at one by one.
    """
    state = session.state
    if not state.usage:
        return "no nodes"
    index = NodeIndex.of(state, *session.config.placement_for(pod))
    counts: dict[str, int] = {}
    ready = [u for u in state.usage.values() if u.node.ready]
    # kube-scheduler's wording, so that what users search for is what they read
    for u in state.usage.values():
        if not u.node.ready:
            why = "were unschedulable" if u.node.cordoned else "were not ready"
            counts[why] = counts.get(why, 0) + 1
    g = pod.gpu
    if g.whole:
        names = list(index.whole_candidates(g.whole))
        bulk = "insufficient GPUs"
    elif g.is_shared:
        names = sorted(set(index.shared_candidates(1)) | set(index.whole_candidates(1)))
        bulk = "no GPU with enough free share"
    else:
        names = list(index.cpu_candidates(False, pod.cpu_millis))
        names += list(index.cpu_candidates(True, pod.cpu_millis))
        bulk = "insufficient cpu"
    if len(ready) > len(names):
        counts[bulk] = len(ready) - len(names)
    for name in names:
        usage = state.usage[name]
        if not _selector_ok(pod, usage):
            why = _selector_reason(pod, usage.node)
        elif not session.reserved.allows(state, pod, name):
            why = "reserved for a waiting gang"
        elif usage.pods_free_future() < 1:
            why = "too many pods"
        elif pod.cpu_millis > usage.cpu_free_future():
            why = "insufficient cpu"
        elif pod.memory_bytes > usage.mem_free_future():
            why = "insufficient memory"
        elif g.whole and sum(map(len, usage.whole_gpus_free())) < g.whole:
            why = "insufficient GPUs"
        elif g.is_shared:
            why = "no GPU with enough free share"
        else:
            why = "does not fit"
        counts[why] = counts.get(why, 0) + 1
    parts = [f"{n} node(s) {why}" for why, n in sorted(counts.items())]
    return f"0/{len(state.usage)} nodes are available: " + ", ".join(parts) + "."
