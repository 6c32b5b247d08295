"""Simulating one scenario of a victim search on the live state, inside the open
statement (the part KAI's by-pod solver plays): evict the victims, then place the asking
job's step and give each victim job one gang step back, in fair order. Victims that land
again elsewhere are moved (Pipelined on their new node), those that land where they are
stay as they were, the others are evicted (Releasing). The action's validator then
accepts or rejects the outcome; a rejected one is rolled back."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gpushare.model import ACTIVE_ALLOCATED, Job, Pod, PodStatus
from gpushare.model.quantities import MILLI, Quantities, as_quantities
from gpushare.scheduler.actions.common.figures import QueueFigures
from gpushare.scheduler.actions.common.ordering import CompareMemo, pick_fair
from gpushare.scheduler.actions.common.outcome import Outcome, Validator
from gpushare.scheduler.gang import GangView
from gpushare.scheduler.ordering import job_order_key
from gpushare.scheduler.placement import place_pod, place_step
from gpushare.scheduler.plugins.proportion.resource_share import QueueShare
from gpushare.scheduler.session import Session
from gpushare.scheduler.state import Statement

#: Entries kept by the fair-order memos before they start afresh (memory only).
_REQUEST_MEMO_LIMIT = 50_000
_COMPARE_MEMO_LIMIT = 500_000

#: A victim's place before the scenario: status, node, GPU indices, portion.
Was = tuple[PodStatus, str | None, tuple[int, ...], int]

_ON_NODE = frozenset({PodStatus.RUNNING, PodStatus.BINDING})


@dataclass(slots=True)
class FairOrderMemo:
    """Comparisons and step requests that recur between picks and between the
    simulations of an action's searches; ``untaken`` is shared with the victim queues
    (comparisons of queues nothing was taken from)."""

    compared: CompareMemo = field(default_factory=CompareMemo)
    untaken: dict[tuple[int, int], tuple[QueueShare, QueueShare, int]] = field(
        default_factory=dict
    )
    requests: dict[tuple[str, ...], Quantities] = field(default_factory=dict)

    def trim(self) -> None:
        if len(self.untaken) >= _COMPARE_MEMO_LIMIT:
            self.untaken.clear()
        if len(self.compared) >= _COMPARE_MEMO_LIMIT:
            self.compared = CompareMemo()


@dataclass(slots=True)
class Simulation:
    session: Session
    figures: QueueFigures
    #: Why and by which action the victims are evicted (the statement records both).
    reason: str
    action: str
    validator: Validator
    #: Whether the asking job is placed before the victims' jobs (see ``SearchRules``).
    preemptor_first: Callable[[Job], bool] | None = None
    #: Whether a victim placed again before the asking job first tries where it runs.
    stay_before_asking: bool = False
    memo: FairOrderMemo = field(default_factory=FairOrderMemo)

    def run(
        self, stmt: Statement, job: Job, partial: list[Pod], victims: list[Pod],
        quantities: dict[str, Quantities],
    ) -> Outcome | None:
        session = self.session
        behaviour = session.behaviour
        cp = stmt.checkpoint()
        before: dict[str, Was] = {
            p.key: (p.status, p.node, p.gpu_indices, p.portion) for p in victims
        }
        for pod in victims:
            stmt.evict(pod, self.reason, self.action)
        steps = self._steps(job, partial, victims)
        placed, handled = self._place_in_fair_order(stmt, job, steps, before)
        if not placed:
            stmt.rollback(cp)
            return None
        if behaviour.victims_stay_home:
            self._settle_victims(stmt, {k: v for k, v in steps.items() if k not in handled},
                                 before)
        outcome = self._outcome(stmt, job, partial, victims, quantities)
        types = session.proportion.gpu_types
        if types is not None and not types.placed_within_limits(job, outcome.placed):
            # Victims of its own queues that stayed where they were count again.
            stmt.rollback(cp)
            return None
        if not self.validator(outcome):
            stmt.rollback(cp)
            return None
        return outcome

    def _steps(self, job: Job, partial: list[Pod], victims: list[Pod]) -> dict[str, list[Pod]]:
        """The asking job's step first, then one gang step back per victim job."""
        victim_keys = {p.key for p in victims}
        by_job: dict[str, list[Pod]] = {}
        for pod in victims:
            by_job.setdefault(pod.job, []).append(pod)
        steps: dict[str, list[Pod]] = {job.key: partial}
        for key, pods in by_job.items():
            if key != job.key:
                steps[key] = self._replacement_step(self.session.state.jobs[key], pods,
                                                    victim_keys)
        return steps

    def _place_in_fair_order(
        self, stmt: Statement, job: Job, steps: dict[str, list[Pod]],
        before: Mapping[str, Was],
    ) -> tuple[bool, set[str]]:
        """Place the steps in fair order; with ``victims_stay_home`` stop once the asking
        job is placed. Returns whether it was, and the jobs handled."""
        session = self.session
        behaviour = session.behaviour
        handled: set[str] = set()
        placed = False
        for nxt in self._fair_order(steps):
            handled.add(nxt.key)
            step = steps[nxt.key]
            if nxt.key == job.key:
                if not session.proportion.check_capacity(job, step).ok:
                    break
                # KAI pipelines every pod of the step; gpushare binds the step when all of
                # it fits on free capacity (place_step pipelines it all otherwise).
                pipeline_only = behaviour.pipeline_asking_step
                if not place_step(session, stmt, job, step, pipeline_only=pipeline_only).ok:
                    break
                placed = True
                if behaviour.victims_stay_home:
                    break
            else:
                self._place_again(stmt, nxt, step, before, home_first=self.stay_before_asking)
        return placed, handled

    def _outcome(
        self, stmt: Statement, job: Job, partial: list[Pod], victims: list[Pod],
        quantities: dict[str, Quantities],
    ) -> Outcome:
        evicted = [p for p in victims if p.status not in ACTIVE_ALLOCATED]
        moved = [p for p in victims if p.status is PodStatus.PIPELINED]
        if any(p.status is PodStatus.BINDING for p in partial) and (
            moved or _moved_this_cycle(self.session)
        ):
            # A moved pod still runs on its old node until it is gone, which the state no
            # longer shows: nothing placed this cycle may count on binding now.
            for pod in partial:
                if pod.status is PodStatus.BINDING:
                    stmt.pipeline(pod, pod.node, pod.gpu_indices, pod.portion)  # type: ignore[arg-type]
        taken = [p for p in victims if p in evicted or p in moved]
        return Outcome(job, list(partial), evicted, moved, dict(quantities), taken)

    def _settle_victims(
        self, stmt: Statement, rest: dict[str, list[Pod]], before: Mapping[str, Was],
    ) -> None:
        """The victims left once the asking job is placed: every victim step that still
        fits where it runs stays there, whole; the others are placed again in fair order.

        Putting unneeded victims back first means a victim moved for another one never
        displaces a victim that could have stayed, and most victims of a wide scenario
        cost one check instead of a placement search."""
        if not rest:
            return
        session = self.session
        jobs = session.state.jobs
        elsewhere: dict[str, list[Pod]] = {}
        for key, step in rest.items():
            if not step or not session.proportion.check_capacity(jobs[key], step).ok:
                continue  # it cannot come back at all (as in _place_again)
            cp = stmt.checkpoint()
            if all(self._back_home(pod, before[pod.key]) for pod in step):
                continue
            stmt.rollback(cp)
            elsewhere[key] = step
        if not elsewhere:
            return
        for nxt in self._fair_order(elsewhere, asking=False):
            self._place_again(stmt, nxt, elsewhere[nxt.key], before, home_first=True)

    def _place_again(
        self, stmt: Statement, job: Job, step: list[Pod], before: Mapping[str, Was],
        home_first: bool = False,
    ) -> bool:
        """Place a victim job's step again, all or nothing, pod by pod (so that a pod
        that lands back home keeps its old place before the next one is placed).

        Once the asking job is placed, a victim that still fits where it runs stays there
        (``victims_stay_home``); before that, it is placed like any pod, so that it can
        make way for the asking job (consolidation)."""
        session = self.session
        if not step or not session.proportion.check_capacity(job, step).ok:
            return False
        cp = stmt.checkpoint()
        home_first = home_first and session.behaviour.victims_stay_home
        for pod in step:
            if home_first and self._back_home(pod, before[pod.key]):
                continue
            if place_pod(session, stmt, pod, pipeline_only=True) is None:
                stmt.rollback(cp)
                return False
            self._stay_if_back_home(pod, before[pod.key])
        return True

    def _back_home(self, pod: Pod, was: Was) -> bool:
        """Put a victim back exactly where it runs when that still has room for it, so
        it keeps running (KAI places victims again like any pod, which may move one that
        did not have to move)."""
        status, node, gpu_indices, portion = was
        if node is None or status not in _ON_NODE:
            return False
        state = self.session.state
        usage = state.usage.get(node)
        if usage is None or not usage.node.ready:
            return False
        if (
            usage.pods_free_future() < 1
            or pod.cpu_millis > usage.cpu_free_future()
            or pod.memory_bytes > usage.mem_free_future()
        ):
            return False
        need = MILLI if pod.gpu.whole else portion if pod.gpu.is_shared else 0
        if any(usage.gpu_free_future(i) < need for i in gpu_indices):
            return False
        state.set_pod(pod, status, node, gpu_indices, portion)
        return True

    def _stay_if_back_home(self, pod: Pod, was: Was) -> None:
        """A victim placed again where it runs (its node; for a GPU share, the same GPU)
        is not moved at all: it keeps running as it was, when its old GPUs were not
        handed to someone else meanwhile."""
        status, node, gpu_indices, portion = was
        if pod.status is not PodStatus.PIPELINED or pod.node != node or node is None:
            return
        if status not in (PodStatus.RUNNING, PodStatus.BINDING):
            return
        if pod.gpu.is_shared and tuple(sorted(pod.gpu_indices)) != tuple(sorted(gpu_indices)):
            return  # a share on another GPU of the node is a move
        state = self.session.state
        moved_to = (pod.gpu_indices, pod.portion)
        state.set_pod(pod, status, node, gpu_indices, portion)
        usage = state.usage[node]
        fits = (
            usage.cpu_free_future() >= 0
            and usage.mem_free_future() >= 0
            and usage.pods_free_future() >= 0
            and all(usage.gpu_free_future(i) >= 0 for i in gpu_indices)
        )
        if not fits:
            state.set_pod(pod, PodStatus.PIPELINED, node, *moved_to)

    def _replacement_step(self, job: Job, evicted: list[Pod], victim_keys: set[str]) -> list[Pod]:
        """One gang step of a victim job's evicted pods: what it may get back."""
        pods = self.session.state.job_pods(job)
        shadow: list[Pod] = []
        for pod in pods:
            if pod.key in victim_keys:
                shadow.append(replace(pod, status=PodStatus.PENDING, node=None))
            elif pod.status in ACTIVE_ALLOCATED or pod.status is PodStatus.SUCCEEDED:
                shadow.append(pod)
        step = GangView(job, shadow, self.session.behaviour.spare_pods_by_ratio).next_step()
        if not step:
            return []
        by_key = {p.key: p for p in evicted}
        real = [by_key[p.key] for p in step if p.key in by_key]
        return real if len(real) == len(step) else []

    def _request_of(self, pods: list[Pod]) -> Quantities:
        """One mapping per step, so the memo recognises an unchanged request by identity."""
        requests = self.memo.requests
        step_key = tuple(p.key for p in pods)
        asked = requests.get(step_key)
        if asked is None:
            if len(requests) >= _REQUEST_MEMO_LIMIT:
                requests.clear()
            vec = self.session.step_request(pods, self.session.min_gpu_memory)
            asked = requests[step_key] = as_quantities(vec)
        return asked

    def _fair_order(self, steps: dict[str, list[Pod]], asking: bool = True) -> Iterator[Job]:
        """The preemptor and the victim jobs in fair order, re-evaluated after each one
        (each side compared with the step it would place).

        Under ``Behaviour.fair_order_over_pending`` the order runs over every job with a
        pending pod as well (KAI's GetJobsToAllocate): a queue is compared with its best
        job there, which may be one this simulation does not place (it is passed over when
        it comes up). So a victim's queue can come before the asking job's queue and take
        its victim's room back, and then the asking job does not fit: reclaim does not
        start what would be reclaimed back."""
        session = self.session
        jobs = session.state.jobs
        left = dict(steps)
        others: dict[str, list[Pod]] = {}
        if asking and session.behaviour.fair_order_over_pending:
            for other in session.state.jobs_with_pending_pods():
                if other.key in left:
                    continue
                step = session.gang(other).next_step()
                if step:
                    others[other.key] = step
        totals = self.figures.totals()
        first = next(iter(steps))  # the asking job
        self.memo.trim()
        memo = self.memo.compared
        keys: dict[str, tuple[Any, ...]] = {}

        def order_key(j: Job) -> tuple[Any, ...]:
            # A job's order key changes only when its own pods do, and a job leaves the
            # order as soon as its pods are placed.
            if j.key not in keys:
                keys[j.key] = job_order_key(session, j)
            return keys[j.key]

        if asking and self.preemptor_first is not None and self.preemptor_first(jobs[first]):
            del left[first]
            yield jobs[first]
        by_leaf: dict[str, list[Job]] = {}
        for key in left:
            by_leaf.setdefault(jobs[key].queue, []).append(jobs[key])
        for key in others:
            by_leaf.setdefault(jobs[key].queue, []).append(jobs[key])
        # Only the leaf a job was taken from gets a new best job.
        best = {leaf: min(candidates, key=order_key) for leaf, candidates in by_leaf.items()}
        while left:
            requests = {
                leaf: self._request_of(left[j.key] if j.key in left else others[j.key])
                for leaf, j in best.items()
            }
            leaf = pick_fair(self.figures.branches(iter(requests)), totals, requests, memo)
            if leaf is None:
                return
            chosen = best[leaf]
            rest = by_leaf[leaf]
            rest.remove(chosen)
            if rest:
                best[leaf] = min(rest, key=order_key)
            else:
                del best[leaf]
            if chosen.key not in left:
                continue  # a pending job outside the simulation: passed over
            del left[chosen.key]
            yield chosen


def _moved_this_cycle(session: Session) -> bool:
    """Whether an earlier search of this cycle moved a running pod to another node."""
    state = session.state
    for key, before in state.touched().items():
        pod = state.pods.get(key)
        if pod is not None and pod.status is PodStatus.PIPELINED and before in _ON_NODE:
            return True
    return False
