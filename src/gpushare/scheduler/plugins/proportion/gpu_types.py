"""Quota, limit and fair share per GPU type.

A queue may give its ``gpu`` figures per GPU type (``Queue.gpu_types``: ``H100`` quota 4,
``L40S`` quota 8, ...). A node's type is its ``nvidia.com/gpu.product`` label, in the one
form :func:`~gpushare.model.gpu_products.gpu_type_name` gives (``NVIDIA-H100-80GB-HBM3``
is ``H100``); a pod asks for types through its node selector or required node affinity
on that label (none: any type).

* **Division.** Each type named by some queue is divided on its own: the GPUs of the ready
  nodes of that type, among all queues, by the same rules as ``gpu``
  (:func:`.resource_division.divide`). A queue's figures on a type are its type entry's
  (no entry: its children's quotas summed, 0 for a leaf; limit unlimited; its ``gpu``
  over-quota weight), the limit capped by its ``gpu`` limit; what it asks for is what it
  holds on that type plus its pending GPU pods that may run there. Past usage is its
  ``gpu`` usage.
* **Charge.** A queue holds on a type the GPUs of its pods on nodes of that type (Binding,
  Running, Pipelined), whatever the pods asked for.
* **Limits.** A pod may go to a node of a type only while every queue of its chain with
  an entry for the type stays within that entry's limit (and, for a non-preemptible
  job, within its quota). ``gpu`` quota and limit still bound the total as before.
* **Shares.** On a type asked for beyond its capacity this cycle (*contended*), a pod
  may not take a queue of its chain above its share of the type (quota or fair share,
  capped by the limit): that would be another queue's share, which would take it back by
  reclaim at once. An uncontended type may be used freely (every share covers what its
  queue asks for).
* **Several types.** A pod that may run on several types goes to the type where its
  leaf queue has the most room under its share there (quota or fair share, capped by
  the limit, less what it holds); types no queue names come last; ties keep the usual
  node order.
* **Reclaim.** A victim's GPUs on a node of a named type may be reclaimed only from a
  branch that holds more of that type than its share of it (:mod:`.gpu_type_reclaim`).

Built once per cycle, only when some queue has a type entry (never under ``compat:
kai``, whose loaders refuse the entries): with none, nothing here runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import TypeVar

from gpushare.model.gpu_products import GPU_PRODUCT_LABEL, gpu_type_name
from gpushare.model.job import Job
from gpushare.model.pod import Pod, PodStatus
from gpushare.model.quantities import CPU, GPU, MEMORY, MILLI, RESOURCES
from gpushare.model.queue import UNLIMITED, Queue
from gpushare.scheduler.config import Config
from gpushare.scheduler.plugins.proportion.resource_division import ShareInput, divide
from gpushare.scheduler.plugins.proportion.resource_share import allocatable
from gpushare.scheduler.state import ClusterState

F0 = Fraction(0)
INF = Fraction(10**18)
T = TypeVar("T")


def pod_types(pod: Pod) -> frozenset[str] | None:
    """The GPU types a pod may run on by its node selector and required affinity on the
    product label (None: any)."""
    out: frozenset[str] | None = None
    wanted = pod.node_selector.get(GPU_PRODUCT_LABEL)
    if wanted is not None:
        out = frozenset((gpu_type_name(wanted),))
    for key, values in pod.node_affinity:
        if key == GPU_PRODUCT_LABEL:
            allowed = frozenset(gpu_type_name(v) for v in values)
            out = allowed if out is None else out & allowed
    return out


def held_gpus(pod: Pod, gpu_memory_mib: int) -> Fraction:
    """The GPUs a pod holds (or would hold) on a node with GPUs of this memory."""
    g = pod.gpu
    if g.whole:
        return Fraction(g.whole)
    if g.is_shared:
        return Fraction(g.portion_on(gpu_memory_mib) * g.devices, MILLI)
    return F0


class GpuTypes:
    """The per-type figures of one cycle (see the module's description)."""

    def __init__(self, state: ClusterState, config: Config, min_gpu_memory: int | None) -> None:
        self.state = state
        #: The types some queue names, in name order.
        self.types: list[str] = sorted({t for q in state.queues.values() for t in q.gpu_types})
        #: Per node: its GPU type (None: no product label).
        self.node_type: dict[str, str | None] = {}
        self.capacity: dict[str, Fraction] = {t: F0 for t in self.types}
        for name, node in state.nodes.items():
            label = node.labels.get(GPU_PRODUCT_LABEL)
            kind = None if label is None else gpu_type_name(label)
            self.node_type[name] = kind
            if node.ready and kind in self.capacity:
                self.capacity[kind] += node.gpus
        self._label_type: dict[str, str] = {}
        #: Types whose GPUs are asked for beyond their capacity this cycle.
        self.contended: set[str] = set()
        self._quota_memo: dict[tuple[str, str], Fraction] = {}
        self.fair: dict[str, dict[str, Fraction]] = self._divide(config, min_gpu_memory)

    @staticmethod
    def of(state: ClusterState, config: Config,
           min_gpu_memory: int | None) -> GpuTypes | None:
        """The cycle's per-type figures, or None when no queue has a type entry (always
        under ``compat: kai``)."""
        if config.kai or not any(q.gpu_types for q in state.queues.values()):
            return None
        return GpuTypes(state, config, min_gpu_memory)

    # ------------------------------------------------------------- figures
    def figures(self, queue: Queue, kind: str) -> tuple[Fraction, Fraction, Fraction]:
        """A queue's quota, limit and over-quota weight on a type (see the module's
        description)."""
        spec = queue.gpu_types.get(kind)
        quota = self._children_quota(queue, kind) if spec is None else spec.quota
        limit = UNLIMITED if spec is None else spec.limit
        weight = queue.gpu.over_quota_weight if spec is None else spec.over_quota_weight
        plain = queue.gpu.limit
        if plain != UNLIMITED:
            limit = plain if limit == UNLIMITED else min(limit, plain)
        return quota, limit, weight

    def _children_quota(self, queue: Queue, kind: str) -> Fraction:
        """The quota on a type of a queue without an entry for it: its children's (0 for
        a leaf; unlimited when a child's is)."""
        key = (queue.name, kind)
        got = self._quota_memo.get(key)
        if got is None:
            got = F0
            for kid in queue.children:
                quota = self.figures(self.state.queues[kid], kind)[0]
                if quota == UNLIMITED:
                    got = UNLIMITED
                    break
                got += quota
            self._quota_memo[key] = got
        return got

    def held(self, name: str, kind: str) -> tuple[Fraction, Fraction]:
        """What a queue (with its subtree) holds on a type, and of that what its
        non-preemptible jobs hold: the state's running figures per product label
        (``QueueUsage.by_product``), so it follows every statement."""
        usage = self.state.queue_usage.get(name)
        if usage is None or not usage.by_product:
            return F0, F0
        held = held_np = 0
        for label, (milli, milli_np) in usage.by_product.items():
            found = self._label_type.get(label)
            if found is None:
                found = self._label_type[label] = gpu_type_name(label)
            if found == kind:
                held += milli
                held_np += milli_np
        return Fraction(held, MILLI), Fraction(held_np, MILLI)

    def room(self, name: str, kind: str) -> Fraction:
        """How far a queue is below its share of a type (quota or fair share, capped by
        the limit), less what it holds (INF: unbounded)."""
        quota, limit, _ = self.figures(self.state.queues[name], kind)
        share = allocatable(quota, limit, self.fair[kind].get(name, F0))
        return INF if share == UNLIMITED else share - self.held(name, kind)[0]

    # ------------------------------------------------------------ division
    def _requests(self, min_gpu_memory: int | None) -> dict[str, dict[str, Fraction]]:
        """Per leaf queue and type: what it holds there plus its pending GPU pods that may
        run there."""
        state = self.state
        out: dict[str, dict[str, Fraction]] = {}
        for name, queue in state.queues.items():
            if queue.is_leaf():
                out[name] = {t: self.held(name, t)[0] for t in self.types}
        for pod in state.pods.values():
            if pod.status is not PodStatus.PENDING or not pod.gpu.wants_gpu:
                continue
            job = state.jobs.get(pod.job)
            if job is None or job.queue not in out:
                continue
            allowed = pod_types(pod)
            gpus = pod.gpu.gpus_exact(min_gpu_memory)
            for kind in self.types:
                if allowed is None or kind in allowed:
                    out[job.queue][kind] += gpus
        return out

    def _divide(self, config: Config, min_gpu_memory: int | None) -> dict[str, dict[str, Fraction]]:
        requests = self._requests(min_gpu_memory)
        unlimited = {CPU: UNLIMITED, MEMORY: UNLIMITED}
        fair: dict[str, dict[str, Fraction]] = {}
        for kind in self.types:
            asked = sum((r[kind] for r in requests.values()), F0)
            if asked > self.capacity[kind]:
                self.contended.add(kind)
            inputs = []
            for name, queue in sorted(self.state.queues.items()):
                quota, limit, weight = self.figures(queue, kind)
                inputs.append(ShareInput(
                    name=name, parent=queue.parent, priority=queue.priority,
                    created_at=queue.created_at,
                    quota={GPU: quota, CPU: F0, MEMORY: F0},
                    limit={GPU: limit, **unlimited},
                    weight={r: weight if r == GPU else queue.resources[r].over_quota_weight
                            for r in RESOURCES},
                    request={GPU: requests[name][kind]} if name in requests else {},
                    usage={r: Fraction(str(v)) for r, v in queue.usage.items() if r == GPU},
                ))
            capacity = {GPU: self.capacity[kind], CPU: F0, MEMORY: F0}
            shares = divide(capacity, inputs, config.k_value, config.fairshare_mode)
            fair[kind] = {name: s[GPU] for name, s in shares.items()}
        return fair

    # ----------------------------------------------------------- placement
    def node_refusal(self, job: Job, pod: Pod, node: str, gpu_memory_mib: int) -> str | None:
        """Why the pod may not go to this node by its chain's per-type limits and quotas
        (None: it may)."""
        kind = self.node_type.get(node)
        if kind is None or kind not in self.capacity:
            return None
        gpus = held_gpus(pod, gpu_memory_mib)
        if not gpus:
            return None
        for name in self.state.ancestors(job.queue):
            spec = self.state.queues[name].gpu_types.get(kind)
            if spec is None:
                continue
            held, held_np = self.held(name, kind)
            if spec.limit != UNLIMITED and held + gpus > spec.limit:
                return (f"GpuTypeLimit: queue {name}: allocated {float(held):g} + request "
                        f"{float(gpus):g} {kind} GPU > {kind} limit {float(spec.limit):g}")
            if (not job.preemptible and spec.quota != UNLIMITED
                    and held_np + gpus > spec.quota):
                return (f"NonPreemptibleOverQuota: queue {name}: non-preemptible allocated "
                        f"{float(held_np):g} + request {float(gpus):g} {kind} GPU > {kind} "
                        f"quota {float(spec.quota):g}")
        return self._share_refusal(job, gpus, kind)

    def _share_refusal(self, job: Job, gpus: Fraction, kind: str) -> str | None:
        """On a contended type, no queue of the chain goes above its share of it: what
        it would take is another queue's share (else the other queue takes it back by
        reclaim, and the GPUs go back and forth)."""
        if kind not in self.contended:
            return None
        for name in self.state.ancestors(job.queue):
            room = self.room(name, kind)
            if gpus > room:
                return (f"GpuTypeShare: queue {name}: request {float(gpus):g} {kind} GPU > "
                        f"{float(max(room, F0)):g} left under its {kind} share, while "
                        f"{kind} GPUs are asked for beyond the {float(self.capacity[kind]):g} "
                        "there are")
        return None

    def placed_within_limits(self, job: Job, placed: Iterable[Pod]) -> bool:
        """After a simulated eviction scenario: the job's chain is within its per-type
        limits on every type its placed pods landed on (victims of its own queues that
        stayed where they were count again)."""
        kinds = {self.node_type.get(p.node) for p in placed if p.node and p.gpu.wants_gpu}
        for name in self.state.ancestors(job.queue):
            for kind, spec in self.state.queues[name].gpu_types.items():
                if (kind in kinds and spec.limit != UNLIMITED
                        and self.held(name, kind)[0] > spec.limit):
                    return False
        return True

    def step_refusal(self, job: Job, pods: Sequence[Pod], gpu_memory: int | None) -> str | None:
        """Why a step cannot fit under its chain's per-type limits on any type it may use
        (None: it may fit; the per-node check decides). Only when every type the step
        may use is bounded by some queue of the chain."""
        gpu_pods = [p for p in pods if p.gpu.wants_gpu]
        if not gpu_pods:
            return None
        allowed: frozenset[str] | None = None
        for pod in gpu_pods:
            kinds = pod_types(pod)
            if kinds is not None:
                allowed = kinds if allowed is None else allowed & kinds
        if allowed is None:
            allowed = frozenset(k for k in self.node_type.values() if k is not None)
            if None in self.node_type.values():
                return None  # nodes without a type: no per-type bound there
        chain = self.state.ancestors(job.queue)
        rooms: dict[str, Fraction] = {}
        for kind in sorted(allowed):
            if kind not in self.capacity:
                return None
            left = INF
            for name in chain:
                spec = self.state.queues[name].gpu_types.get(kind)
                if spec is not None and spec.limit != UNLIMITED:
                    left = min(left, spec.limit - self.held(name, kind)[0])
            if left == INF:
                return None
            rooms[kind] = max(left, F0)
        asked = sum((p.gpu.gpus_exact(gpu_memory) for p in gpu_pods), F0)
        if asked <= sum(rooms.values(), F0):
            return None
        listed = ", ".join(f"{k} {float(v):g}" for k, v in rooms.items())
        return (f"GpuTypeLimit: queue {job.queue}: request {float(asked):g} GPU > what its "
                f"per-type limits leave ({listed})")

    def may_prefer(self, pod: Pod) -> bool:
        """Whether the pod may run on several types (so :meth:`prefer` may reorder)."""
        allowed = pod_types(pod)
        return allowed is None or len(allowed) > 1

    def prefer(self, job: Job, pod: Pod, fits: list[T], node_of: Mapping[int, str]) -> list[T]:
        """``fits`` (best first; ``node_of``: each one's node by position) reordered for a
        pod that may run on several types: the type where the leaf queue has the most room
        under its share first, types no queue names last; stable otherwise."""
        if not self.may_prefer(pod):
            return fits
        kinds = {self.node_type.get(node_of[i]) for i in range(len(fits))}
        if len(kinds) < 2:
            return fits
        rank: dict[str | None, tuple[int, Fraction]] = {
            k: ((0, -self.room(job.queue, k)) if k is not None and k in self.capacity
                else (1, F0))
            for k in kinds}
        order = sorted(range(len(fits)), key=lambda i: rank[self.node_type.get(node_of[i])])
        return [fits[i] for i in order]

    def report(self, name: str) -> dict[str, float]:
        """A queue's fair share per type, in GPUs."""
        return {kind: float(self.fair[kind].get(name, F0)) for kind in self.types}


def typed_units(pods: Iterable[Pod], node_type: Mapping[str, str | None]) -> dict[str, Fraction]:
    """GPUs per type held by these pods (on nodes of a type)."""
    out: dict[str, Fraction] = {}
    for pod in pods:
        kind = node_type.get(pod.node) if pod.node else None
        if kind is None:
            continue
        gpus = Fraction(pod.held().gpu, MILLI)
        if gpus:
            out[kind] = out.get(kind, F0) + gpus
    return out
