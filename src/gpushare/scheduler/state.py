"""The live cluster state and its transactions.

The state is kept incrementally: nodes, queues, jobs and pods are added, updated and
removed as deltas, and every pod change updates the per-node and per-queue running
totals at once, so that a scheduling cycle never rebuilds the world.

All changes made during a cycle go through a :class:`Statement`, an undo log with
checkpoints: an action can place pods, look at the result and roll it back.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, TypeVar, cast

from gpushare.model.gpu_products import GPU_PRODUCT_LABEL
from gpushare.model.job import Job
from gpushare.model.node import Node
from gpushare.model.pod import ACTIVE_ALLOCATED, ON_NODE, Pod, PodStatus
from gpushare.model.quantities import MILLI, ZERO, Res
from gpushare.model.queue import Queue
from gpushare.model.reservation import Reservation
from gpushare.scheduler.bind_backoff import BindBackoff
from gpushare.scheduler.semi import core_held

if TYPE_CHECKING:
    from gpushare.scheduler.fragmentation import TaskMix

T = TypeVar("T")

#: A fair-share division's levels, by the inputs they depend on (see ``divide``).
DivisionMemo = dict[tuple[Any, ...], dict[str, Fraction]]


class StateError(ValueError):
    """An inconsistent change (unknown queue, pod on an unknown node, ...)."""


@dataclass(slots=True)
class NodeUsage:
    """What a node's pods hold.

    ``used`` counts Running, Binding and Releasing pods; ``rel`` the Releasing ones among
    them; ``pipe`` Pipelined pods, which wait for what Releasing pods free. Free now is
    ``cap - used - max(0, pipe - rel)``; free once releases finish is ``cap - used + rel - pipe``.
    """

    node: Node
    cpu_used: int = 0
    cpu_rel: int = 0
    cpu_pipe: int = 0
    mem_used: int = 0
    mem_rel: int = 0
    mem_pipe: int = 0
    pods_used: int = 0
    pods_rel: int = 0
    pods_pipe: int = 0
    gpu_used: list[int] = field(default_factory=list)  # milli-GPU per physical GPU
    gpu_rel: list[int] = field(default_factory=list)
    gpu_pipe: list[int] = field(default_factory=list)
    gpu_shared: list[int] = field(default_factory=list)  # shared (fractional) pods per GPU
    gpu_names: dict[int, str] = field(default_factory=dict)  # shared-GPU group names, for reports
    pods: dict[str, None] = field(default_factory=dict)  # keys of pods on the node, ordered
    version: int = 0  # bumped on every change, so that derived figures can be cached
    #: Bumped on every change that stays: outside a statement, or in a committed one
    #: (changes a statement rolls back do not count), for caches that outlive a search.
    settled: int = 0

    @staticmethod
    def _now(cap: int, used: int, rel: int, pipe: int) -> int:
        over = pipe - rel
        return cap - used - (over if over > 0 else 0)

    def cpu_free_now(self) -> int:
        return self._now(self.node.cpu_millis, self.cpu_used, self.cpu_rel, self.cpu_pipe)

    def cpu_free_future(self) -> int:
        return self.node.cpu_millis - self.cpu_used + self.cpu_rel - self.cpu_pipe

    def mem_free_now(self) -> int:
        return self._now(self.node.memory_bytes, self.mem_used, self.mem_rel, self.mem_pipe)

    def mem_free_future(self) -> int:
        return self.node.memory_bytes - self.mem_used + self.mem_rel - self.mem_pipe

    def pods_free_now(self) -> int:
        return self._now(self.node.max_pods, self.pods_used, self.pods_rel, self.pods_pipe)

    def pods_free_future(self) -> int:
        return self.node.max_pods - self.pods_used + self.pods_rel - self.pods_pipe

    def gpu_free_now(self, i: int) -> int:
        return self._now(MILLI, self.gpu_used[i], self.gpu_rel[i], self.gpu_pipe[i])

    def gpu_free_future(self, i: int) -> int:
        return MILLI - self.gpu_used[i] + self.gpu_rel[i] - self.gpu_pipe[i]

    def gpus_free_future_milli(self) -> int:
        """Idle plus releasing GPU, summed over the node's GPUs, in milli-GPUs."""
        return sum(self.gpu_free_future(i) for i in range(self.node.gpus))

    def whole_gpus_free(self) -> tuple[list[int], list[int]]:
        """GPUs entirely free now, and those that will be once releases finish."""
        now: list[int] = []
        later: list[int] = []
        for i in range(self.node.gpus):
            if self.gpu_free_future(i) == MILLI:
                if self.gpu_free_now(i) == MILLI:
                    now.append(i)
                else:
                    later.append(i)
        return now, later


@dataclass(slots=True)
class QueueUsage:
    """Running totals of one queue, its own jobs and its whole subtree."""

    queue: Queue
    allocated: Res = ZERO  # Binding, Running and Pipelined pods
    allocated_np: Res = ZERO  # the same, of non-preemptible jobs
    pending: Res = ZERO  # Pending pods' requests (memory-sized GPU requests apart)
    pending_gpu_memory_mib: int = 0  # Pending pods' gpu-memory requests x devices, MiB
    version: int = 0  # bumped on every change, so that derived figures can be cached
    #: Bumped on every change that stays: outside a statement, or in a committed one
    #: (changes a statement rolls back do not count), for caches that outlive a search.
    settled: int = 0
    #: Per ``nvidia.com/gpu.product`` value: milli-GPUs held on nodes of that label
    #: (Binding, Running, Pipelined) and, of those, by non-preemptible jobs.
    by_product: dict[str, list[int]] = field(default_factory=dict)


@dataclass(slots=True)
class _Undo:
    pod: Pod
    status: PodStatus
    node: str | None
    gpu_indices: tuple[int, ...]
    portion: int
    evict_reason: str
    evict_action: str


@dataclass(slots=True)
class Kept:
    """Figures derived from the state that later cycles may reuse. Each user keeps its own
    check that they still hold (a version, a policy, the inputs they were made from)."""

    #: The task mix the fragmentation rules use, when fixed (None: learnt from pods).
    task_mix: TaskMix | None = None
    #: The last cycles' fair-share divisions (the session's, and the steady path's).
    fair_share_memo: DivisionMemo | None = None
    steady_share_memo: DivisionMemo | None = None
    #: The division's per-queue inputs (the session's, and the steady path's), by queue,
    #: each with what it was made from.
    share_inputs: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    steady_inputs: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    #: The queue order's per-queue figures, by fair share, quota, limit and capacity.
    order_figures_memo: dict[Any, Any] = field(default_factory=dict)
    #: GPU holders per node (the eviction actions' victim lists).
    gpu_holders: dict[str, tuple[object, int, dict[int, list[tuple[str, int]]]]] = field(
        default_factory=dict
    )
    #: Figures of the modules above the state, each under a class its module declares
    #: (``node_index.NodeIndexes``, ``frag_placement.FragKept``,
    #: ``actions.common.candidates.VictimLeaves``): the state knows none of their types.
    owned: dict[type, object] = field(default_factory=dict)

    def of(self, kind: type[T]) -> T:
        """The figures kept under ``kind`` (made empty, ``kind()``, on first use); only the
        module that declares ``kind`` reads and writes them."""
        found = self.owned.get(kind)
        if found is None:
            found = self.owned[kind] = kind()
        return cast(T, found)



class ClusterState:
    """Nodes, queues, jobs and pods, with running totals kept up to date."""

    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        self.usage: dict[str, NodeUsage] = {}
        self.queues: dict[str, Queue] = {}
        self.queue_usage: dict[str, QueueUsage] = {}
        self.jobs: dict[str, Job] = {}
        self.pods: dict[str, Pod] = {}
        self._log: list[_Undo] | None = None
        self._touched: dict[str, PodStatus] = {}  # pod key -> status when the cycle began
        self._pending_jobs: dict[str, int] = {}  # job key -> pending pods (only > 0)
        self.job_version: dict[str, int] = {}  # bumped on every change to a job's pods
        #: What each semi-preemptible job's core holds, as charged to ``allocated_np``.
        self._core_np: dict[str, Res] = {}
        #: Per pod holding GPUs on a node with a product label: the label value and
        #: milli-GPUs charged to its queues' ``by_product`` (undone with the same figures).
        self._product_charge: dict[str, tuple[str, int]] = {}
        #: Preemptible jobs per leaf queue (the eviction actions' possible victims).
        self.preemptible_jobs: dict[str, dict[str, Job]] = {}
        self.dirty_nodes: set[str] = set()  # nodes changed since the node index last looked
        self.node_version: int = 0  # bumped when nodes are added, changed or removed
        self._memory_range: tuple[int, tuple[int | None, int | None]] | None = None
        #: Figures derived from the state that later cycles may reuse.
        self.kept = Kept()
        #: Pods whose binds keep failing, left out for a growing number of cycles (the
        #: shell reports the failures).
        self.bind_backoff = BindBackoff()
        #: Nodes reserved for jobs that waited too long, by job key: the cycle's input
        #: (the caller restores them, e.g. from the PodGroups) and output
        #: (``CycleResult.reservations``); the allocate action keeps them up to date.
        self.reservations: dict[str, Reservation] = {}
        #: Jobs the stale-gang pass must look at: added or changed, or with a pod changed,
        #: since it last looked (the pass keeps the ones it finds stale).
        self.stale_watch: set[str] = set()
        #: Nodes whose settled version went up, in order (cleared when a cycle begins),
        #: so that a figure kept over all nodes can catch up with the few that changed.
        self.settled_nodes: list[str] = []
        #: Leaf queues whose usage version went up (it and its ancestors'), in order
        #: (cleared when a cycle begins), so that an order kept over the queues can catch
        #: up with the few that changed.
        self.queue_log: list[str] = []
        #: Per eviction action, the jobs it searched for in the cycles since it last
        #: finished within its search budget: they go after the others, so that every
        #: job gets its turn however the budget falls.
        self.search_turns: dict[str, set[str]] = {}
        # Nodes and leaf queues the open statement changed (settled when it commits).
        self._statement_nodes: set[str] = set()
        self._statement_queues: set[str] = set()

    # ----------------------------------------------------------------- nodes
    def upsert_node(self, node: Node) -> None:
        old = self.usage.get(node.name)
        usage = NodeUsage(
            node,
            gpu_used=[0] * node.gpus,
            gpu_rel=[0] * node.gpus,
            gpu_pipe=[0] * node.gpus,
            gpu_shared=[0] * node.gpus,
        )
        self.nodes[node.name] = node
        self.usage[node.name] = usage
        self.node_version += 1
        self.dirty_nodes.add(node.name)
        if old is not None:
            usage.gpu_names = {i: n for i, n in old.gpu_names.items() if i < node.gpus}
            relabelled = (old.node.labels.get(GPU_PRODUCT_LABEL)
                          != node.labels.get(GPU_PRODUCT_LABEL))
            for key in list(old.pods):
                pod = self.pods[key]
                self._attach_node(pod)
                if relabelled:
                    self._recharge_product(pod)

    def remove_node(self, name: str) -> None:
        usage = self.usage.pop(name, None)
        self.nodes.pop(name, None)
        self.node_version += 1
        self.dirty_nodes.add(name)
        if usage is None:
            return
        # Pods of a vanished node are gone with it: their workloads re-create them.
        for key in list(usage.pods):
            pod = self.pods[key]
            self._detach(pod)  # the node is gone already: queue totals only
            pod.status, pod.node, pod.gpu_indices, pod.portion = PodStatus.PENDING, None, (), 0
            self._attach(pod)

    # ---------------------------------------------------------------- queues
    def upsert_queue(self, queue: Queue) -> None:
        old = self.queues.get(queue.name)
        if old is not None and old.parent != queue.parent and self._queue_has_pods(queue.name):
            raise StateError(f"queue {queue.name}: cannot move a queue that holds pods")
        if old is not None and old.parent and old.parent in self.queues:
            siblings = self.queues[old.parent].children
            if queue.name in siblings:
                siblings.remove(queue.name)
        queue.children = sorted(
            q.name for q in self.queues.values() if q.parent == queue.name and q.name != queue.name
        )
        self.queues[queue.name] = queue
        if queue.parent and queue.parent in self.queues:
            parent = self.queues[queue.parent]
            if queue.name not in parent.children:
                parent.children.append(queue.name)
                parent.children.sort()
        usage = self.queue_usage.get(queue.name)
        if usage is None:
            self.queue_usage[queue.name] = QueueUsage(queue)
        else:
            usage.queue = queue

    def remove_queue(self, name: str) -> None:
        queue = self.queues.get(name)
        if queue is None:
            return
        if queue.children or self._queue_has_pods(name):
            raise StateError(f"queue {name}: still has child queues or jobs")
        if queue.parent and queue.parent in self.queues:
            self.queues[queue.parent].children.remove(name)
        del self.queues[name]
        del self.queue_usage[name]

    def _queue_has_pods(self, name: str) -> bool:
        return any(job.queue == name and job.pods for job in self.jobs.values())

    def ancestors(self, queue_name: str) -> list[str]:
        """The queue and its ancestors, leaf first."""
        chain: list[str] = []
        name: str | None = queue_name
        while name is not None and name in self.queues and name not in chain:
            chain.append(name)
            name = self.queues[name].parent
        return chain

    # ------------------------------------------------------------------ jobs
    def upsert_job(self, job: Job) -> None:
        if job.queue not in self.queues:
            raise StateError(f"job {job.key}: unknown queue {job.queue!r}")
        self.stale_watch.add(job.key)
        # A new version of the job: what was worked out from the old one is out of date.
        # (A key never seen has nothing worked out; no entry is made for it here, so the
        # table keeps the key string its pods share.)
        if job.key in self.job_version:
            self.job_version[job.key] += 1
        old = self.jobs.get(job.key)
        if old is not None:
            self._index_preemptible(old, present=False)
        self._index_preemptible(job, present=True)
        if old is not None:  # its pods move over to the new version
            pods = [self.pods[k] for k in old.pods]
            for pod in pods:
                self._detach_queue(pod)
            if old.semi_preemptible:  # its pods did not change: drop its core's charge
                self._set_core_charge(old, ZERO)
            job.pods = list(old.pods)
            self.jobs[job.key] = job
            for pod in pods:
                self._attach_queue(pod)
        else:
            job.pods = []
            self.jobs[job.key] = job

    def remove_job(self, key: str) -> None:
        job = self.jobs.get(key)
        if job is None:
            return
        for pod_key in list(job.pods):
            self.remove_pod(pod_key)
        del self.jobs[key]
        self._index_preemptible(job, present=False)

    def _index_preemptible(self, job: Job, present: bool) -> None:
        if not job.preemptible:
            return
        if present:
            self.preemptible_jobs.setdefault(job.queue, {})[job.key] = job
            return
        jobs = self.preemptible_jobs.get(job.queue)
        if jobs is not None:
            jobs.pop(job.key, None)
            if not jobs:
                del self.preemptible_jobs[job.queue]

    # ------------------------------------------------------------------ pods
    def upsert_pod(self, pod: Pod) -> None:
        """Add or replace a pod (its job must exist; its node too, unless it is Pending)."""
        job = self.jobs.get(pod.job)
        if job is None:
            raise StateError(f"pod {pod.key}: unknown job {pod.job!r}")
        if pod.node is not None and pod.node not in self.usage:
            raise StateError(f"pod {pod.key}: unknown node {pod.node!r}")
        if pod.key in self.pods:
            self.remove_pod(pod.key)
        self.pods[pod.key] = pod
        job.pods.append(pod.key)
        self._attach(pod)

    def remove_pod(self, key: str) -> None:
        pod = self.pods.get(key)
        if pod is None:
            return
        self._detach(pod)
        del self.pods[key]
        job = self.jobs.get(pod.job)
        if job is not None and key in job.pods:
            job.pods.remove(key)

    def set_pod(
        self,
        pod: Pod,
        status: PodStatus,
        node: str | None = None,
        gpu_indices: tuple[int, ...] = (),
        portion: int = 0,
    ) -> None:
        """Move a pod to a new status (and node / GPUs), logging the change when a
        statement is open."""
        if self._log is not None:
            self._log.append(
                _Undo(pod, pod.status, pod.node, pod.gpu_indices, pod.portion,
                      pod.evict_reason, pod.evict_action)
            )
        self._touched.setdefault(pod.key, pod.status)
        self._detach(pod)
        pod.status, pod.node, pod.gpu_indices, pod.portion = status, node, gpu_indices, portion
        self._attach(pod)

    # ------------------------------------------------------ running totals
    def _attach(self, pod: Pod) -> None:
        self.job_version[pod.job] = self.job_version.get(pod.job, 0) + 1
        self.stale_watch.add(pod.job)
        if pod.node is not None:
            self._attach_node(pod)
        self._attach_queue(pod)
        if pod.status is PodStatus.PENDING:
            self._count_pending(pod, +1)

    def _detach(self, pod: Pod) -> None:
        self.job_version[pod.job] = self.job_version.get(pod.job, 0) + 1
        self.stale_watch.add(pod.job)
        if pod.node is not None and pod.node in self.usage:
            self._node_delta(pod, -1)
        self._detach_queue(pod)
        if pod.status is PodStatus.PENDING:
            self._count_pending(pod, -1)

    def _attach_node(self, pod: Pod) -> None:
        self._node_delta(pod, +1)

    def _node_delta(self, pod: Pod, sign: int) -> None:
        status = pod.status
        if status not in ON_NODE:
            return
        u = self.usage[pod.node]  # type: ignore[index]
        self.dirty_nodes.add(u.node.name)
        u.version += 1
        if self._log is None:
            u.settled += 1
            self.settled_nodes.append(u.node.name)
        else:
            self._statement_nodes.add(u.node.name)
        pods_key = pod.key
        if sign > 0:
            u.pods[pods_key] = None
        else:
            u.pods.pop(pods_key, None)
        cpu, mem = pod.cpu_millis * sign, pod.memory_bytes * sign
        portion = (MILLI if pod.gpu.whole else pod.portion) * sign
        shared = sign if pod.gpu.is_shared else 0
        if status is PodStatus.PIPELINED:
            u.cpu_pipe += cpu
            u.mem_pipe += mem
            u.pods_pipe += sign
            for i in pod.gpu_indices:
                u.gpu_pipe[i] += portion
                u.gpu_shared[i] += shared
            return
        u.cpu_used += cpu
        u.mem_used += mem
        u.pods_used += sign
        for i in pod.gpu_indices:
            u.gpu_used[i] += portion
            u.gpu_shared[i] += shared
        if status is PodStatus.RELEASING:
            u.cpu_rel += cpu
            u.mem_rel += mem
            u.pods_rel += sign
            for i in pod.gpu_indices:
                u.gpu_rel[i] += portion

    def _queue_delta(self, pod: Pod, sign: int) -> None:
        job = self.jobs.get(pod.job)
        if job is None:
            return
        status = pod.status
        if status in ACTIVE_ALLOCATED:
            held = pod.held()
            if sign < 0:
                held = ZERO - held
            self._note_queue_change(job.queue)
            charge = self._product_delta(pod, sign, held.gpu)
            for name in self.ancestors(job.queue):
                qu = self.queue_usage[name]
                qu.version += 1
                qu.allocated = qu.allocated + held
                if not job.preemptible:
                    qu.allocated_np = qu.allocated_np + held
                if charge is not None:
                    got = qu.by_product.setdefault(charge[0], [0, 0])
                    got[0] += charge[1]
                    if not job.preemptible:
                        got[1] += charge[1]
        elif status is PodStatus.PENDING:
            g = pod.gpu
            gpu = g.whole * MILLI if g.whole else g.portion * g.devices
            req = Res(gpu * sign, pod.cpu_millis * sign, pod.memory_bytes * sign)
            mem_mib = g.memory_mib * g.devices * sign
            self._note_queue_change(job.queue)
            for name in self.ancestors(job.queue):
                qu = self.queue_usage[name]
                qu.version += 1
                qu.pending = qu.pending + req
                qu.pending_gpu_memory_mib += mem_mib

    def _product_delta(self, pod: Pod, sign: int, milli: int) -> tuple[str, int] | None:
        """The product label and signed milli-GPUs a pod's change moves in its queues'
        ``by_product`` (None: none, no GPUs or no label)."""
        if sign < 0:
            charged = self._product_charge.pop(pod.key, None)
            return None if charged is None else (charged[0], -charged[1])
        node = self.nodes.get(pod.node) if pod.node is not None else None
        product = None if node is None else node.labels.get(GPU_PRODUCT_LABEL)
        if product is None or not milli:
            return None
        self._product_charge[pod.key] = (product, milli)
        return product, milli

    def _recharge_product(self, pod: Pod) -> None:
        """Move a pod's ``by_product`` charge to its node's current product label."""
        job = self.jobs.get(pod.job)
        if job is None or pod.status not in ACTIVE_ALLOCATED:
            return
        for sign in (-1, 1):
            charge = self._product_delta(pod, sign, pod.held().gpu)
            if charge is None:
                continue
            for name in self.ancestors(job.queue):
                got = self.queue_usage[name].by_product.setdefault(charge[0], [0, 0])
                got[0] += charge[1]
                if not job.preemptible:
                    got[1] += charge[1]

    def _note_queue_change(self, leaf: str) -> None:
        """Log a change of the leaf queue's pods, and count it as settled now or at
        commit."""
        self.queue_log.append(leaf)
        if self._log is None:
            usage = self.queue_usage.get(leaf)
            if usage is not None:
                usage.settled += 1
        else:
            self._statement_queues.add(leaf)

    def _attach_queue(self, pod: Pod) -> None:
        self._queue_delta(pod, +1)
        job = self.jobs.get(pod.job)
        if job is not None and job.semi_preemptible:
            self._charge_core(job, None)

    def _detach_queue(self, pod: Pod) -> None:
        self._queue_delta(pod, -1)
        job = self.jobs.get(pod.job)
        if job is not None and job.semi_preemptible:
            self._charge_core(job, pod.key)

    def _charge_core(self, job: Job, without: str | None) -> None:
        """Charge a semi-preemptible job's core (of its pods but ``without``) as
        non-preemptible use of its queues, in place of what was charged before."""
        self._set_core_charge(
            job, core_held(job, (self.pods[k] for k in job.pods if k != without)))

    def _set_core_charge(self, job: Job, held: Res) -> None:
        old = self._core_np.get(job.key, ZERO)
        if held == old:
            return
        if held == ZERO:
            del self._core_np[job.key]
        else:
            self._core_np[job.key] = held
        diff = held - old
        self._note_queue_change(job.queue)
        for name in self.ancestors(job.queue):
            qu = self.queue_usage[name]
            qu.version += 1
            qu.allocated_np = qu.allocated_np + diff

    def _count_pending(self, pod: Pod, sign: int) -> None:
        n = self._pending_jobs.get(pod.job, 0) + sign
        if n > 0:
            self._pending_jobs[pod.job] = n
        else:
            self._pending_jobs.pop(pod.job, None)

    # --------------------------------------------------------------- queries
    def has_pending_pods(self, job_key: str) -> bool:
        return job_key in self._pending_jobs

    def jobs_with_pending_pods(self) -> list[Job]:
        return [self.jobs[k] for k in sorted(self._pending_jobs) if k in self.jobs]

    def job_pods(self, job: Job) -> list[Pod]:
        return [self.pods[k] for k in job.pods]

    def pods_on(self, node_name: str) -> Iterator[Pod]:
        usage = self.usage.get(node_name)
        if usage is None:
            return iter(())
        return (self.pods[k] for k in usage.pods)

    def gpu_memory_range(self) -> tuple[int | None, int | None]:
        """Smallest and largest per-GPU memory among nodes that have GPUs."""
        known = self._memory_range
        if known is not None and known[0] == self.node_version:
            return known[1]
        sizes = [n.gpu_memory_mib for n in self.nodes.values() if n.gpus > 0]
        found: tuple[int | None, int | None] = (min(sizes), max(sizes)) if sizes else (None, None)
        self._memory_range = (self.node_version, found)
        return found

    # ------------------------------------------------------------ statements
    def statement(self) -> Statement:
        if self._log is not None:
            raise StateError("a statement is already open")
        self._log = []
        return Statement(self)

    def begin_cycle(self) -> None:
        self._touched = {}
        self.settled_nodes = []
        self.queue_log = []
        for key in self.bind_backoff.next_cycle():
            pod = self.pods.get(key)
            if pod is not None:  # its job's gang reads whether the pod is held back
                self.job_version[pod.job] = self.job_version.get(pod.job, 0) + 1

    def touched(self) -> dict[str, PodStatus]:
        """Pods changed since the cycle began, with the status each had then."""
        return self._touched


class Statement:
    """An open transaction on the state: every pod change is logged so that it can be
    rolled back to a checkpoint or discarded. Only one is open at a time."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._open = True

    @property
    def _log(self) -> list[_Undo]:
        log = self.state._log
        if log is None or not self._open:
            raise StateError("the statement is closed")
        return log

    # The three operations actions record.
    def allocate(self, pod: Pod, node: str, gpu_indices: tuple[int, ...] = (),
                 portion: int = 0) -> None:
        """Place a pod on free capacity: it becomes Binding."""
        self.state.set_pod(pod, PodStatus.BINDING, node, gpu_indices, portion)

    def pipeline(self, pod: Pod, node: str, gpu_indices: tuple[int, ...] = (),
                 portion: int = 0) -> None:
        """Place a pod on capacity that Releasing pods still hold: it becomes Pipelined."""
        self.state.set_pod(pod, PodStatus.PIPELINED, node, gpu_indices, portion)

    def evict(self, pod: Pod, reason: str, action: str) -> None:
        """Evict a pod. A pod placed earlier in this cycle simply goes back to Pending;
        one that was already on its node becomes Releasing."""
        self._log.append(
            _Undo(pod, pod.status, pod.node, pod.gpu_indices, pod.portion,
                  pod.evict_reason, pod.evict_action)
        )
        state = self.state
        state._touched.setdefault(pod.key, pod.status)
        state._detach(pod)
        if state._touched[pod.key] is PodStatus.PENDING:
            pod.status, pod.node, pod.gpu_indices, pod.portion = PodStatus.PENDING, None, (), 0
        else:
            pod.status = PodStatus.RELEASING
            pod.evict_reason, pod.evict_action = reason, action
        state._attach(pod)

    def checkpoint(self) -> int:
        return len(self._log)

    def rollback(self, checkpoint: int) -> None:
        log = self._log
        state = self.state
        while len(log) > checkpoint:
            u = log.pop()
            pod = u.pod
            state._detach(pod)
            pod.status, pod.node, pod.gpu_indices, pod.portion = (
                u.status, u.node, u.gpu_indices, u.portion,
            )
            pod.evict_reason, pod.evict_action = u.evict_reason, u.evict_action
            state._attach(pod)

    def commit(self) -> None:
        self._log  # noqa: B018 - raises when closed
        state = self.state
        state._log = None
        self._open = False
        for name in sorted(state._statement_nodes):
            if name in state.usage:
                state.usage[name].settled += 1
                state.settled_nodes.append(name)
        for name in state._statement_queues:
            if name in state.queue_usage:
                state.queue_usage[name].settled += 1
        state._statement_nodes.clear()
        state._statement_queues.clear()

    def discard(self) -> None:
        self.rollback(0)
        state = self.state
        state._log = None
        self._open = False
        state._statement_nodes.clear()
        state._statement_queues.clear()

    def __enter__(self) -> Statement:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if self._open:
            if exc_type is None:
                self.commit()
            else:
                self.discard()
