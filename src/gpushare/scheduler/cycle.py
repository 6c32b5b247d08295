"""The cycle driver: run the configured actions on the state and collect decisions."""

from __future__ import annotations

from gpushare.model.pod import PodStatus
from gpushare.model.quantities import MIB, MILLI, Res, Vec
from gpushare.scheduler.actions.registry import get_action
from gpushare.scheduler.config import Config
from gpushare.scheduler.decisions import Bind, CycleResult, Evict, Pipeline, QueueReport
from gpushare.scheduler.reserved import release_settled
from gpushare.scheduler.session import Session
from gpushare.scheduler.state import ClusterState


def open_session(state: ClusterState, config: Config, now: float) -> Session:
    state.begin_cycle()
    return Session(state, config, now)


def run_cycle(state: ClusterState, config: Config, now: float) -> CycleResult:
    """Run one scheduling cycle on the live state and return what it decided.

    The state is left as the decisions describe it (placed pods Binding / Pipelined,
    victims Releasing); the caller applies the decisions and later reports what settled.
    """
    session = open_session(state, config, now)
    for name in config.actions:
        get_action(name)(session)
    return collect(session)


def _res_natural(res: Res) -> dict[str, float]:
    return {"gpu": res.gpu / MILLI, "cpu": float(res.cpu), "memory": res.mem / MIB}


def _natural(v: Vec) -> dict[str, float]:
    return {
        "gpu": float(v[0]),
        "cpu": float(v[1]),
        "memory": float(v[2] / MIB),
    }


#: Statuses of a pod on its node; one that ends a cycle Pipelined was moved by a victim search.
MOVED_FROM = frozenset({PodStatus.RUNNING, PodStatus.BINDING, PodStatus.RELEASING})


def collect(session: Session) -> CycleResult:
    state = session.state
    result = CycleResult()
    touched = state.touched()
    for key in sorted(touched):
        before = touched[key]
        pod = state.pods.get(key)
        if pod is None or pod.status is before:
            continue
        if pod.status in (PodStatus.BINDING, PodStatus.PIPELINED):
            node = state.nodes[pod.node]  # type: ignore[index]
            if pod.gpu.whole:
                portion, mem = MILLI, node.gpu_memory_mib
            elif pod.gpu.is_shared:
                portion = pod.portion
                mem = pod.gpu.memory_mib or (pod.portion * node.gpu_memory_mib) // MILLI
            else:
                portion, mem = 0, 0
            cls = Bind if pod.status is PodStatus.BINDING else Pipeline
            decision = cls(key, pod.node, pod.gpu_indices, portion, mem)  # type: ignore[arg-type]
            (result.binds if cls is Bind else result.pipelines).append(decision)  # type: ignore[arg-type]
            if pod.status is PodStatus.PIPELINED and before in MOVED_FROM:
                # A victim moved to another node: its running pod must go first (its
                # workload re-creates it), so it is an eviction as well as a pipeline.
                result.evictions.append(Evict(key, pod.evict_reason, pod.evict_action))
        elif pod.status is PodStatus.RELEASING:
            result.evictions.append(Evict(key, pod.evict_reason, pod.evict_action))
    release_settled(state, lambda key: session.gang(state.jobs[key]).satisfied())
    result.reservations = dict(sorted(state.reservations.items()))
    for job_key, reason in sorted(session.pending_reasons.items()):
        if job_key in state.jobs and state.has_pending_pods(job_key):
            held = result.reservations.get(job_key)
            if held is not None:
                reason += (f" Node(s) {', '.join(held.nodes)} are reserved for this job "
                           "until it starts.")
            result.pending_reasons[job_key] = reason
    shares = session.proportion
    for name in sorted(state.queues):
        qu = state.queue_usage[name]
        result.queues[name] = QueueReport(
            fair_share=shares.fair_share_report(name),
            deserved=shares.deserved_report(name),
            allocated=_res_natural(qu.allocated),
            allocated_non_preemptible=_res_natural(qu.allocated_np),
            requested=_natural(shares.requested.get(name, shares.allocated(name))),
        )
    result.searches = {name: dict(figures) for name, figures in session.searches.items()}
    # Staleness is reported for jobs that are stale now or were when the cycle began.
    for key in sorted(session.stale_at_open | {
        k for k, job in state.jobs.items() if job.stale_since is not None
    }):
        job = state.jobs.get(key)
        result.stale_since[key] = None if job is None else job.stale_since
    return result
