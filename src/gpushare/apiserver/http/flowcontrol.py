"""Per-tenant request fairness, in the spirit of Kubernetes' API Priority and Fairness.

One server serves every tenant's logical cluster, so one tenant's storm of LISTs, DELETEs
or watches must not stall another's requests. Each request, once authenticated, is
classified into a *priority level* and a *flow*:

* ``system``: the platform's own identities (``system:masters``, the controllers, the node
  agents, the tenancy controller); one flow per identity;
* ``workload``: everybody else; one flow per logical cluster (tenant).

A level runs at most ``seats`` requests at once and one flow at most ``per_flow`` of them;
the rest wait in their flow's queue, and a freed seat goes to the flows with waiting
requests in turn (round robin), so a tenant with a hundred queued requests and one with a
single request each get the next seat alike. A flow whose queue is full, or a request that
waited ``queue_timeout_s``, is answered 429 with ``Retry-After`` (clients retry). A seat is
held while the handler runs; a watch holds one only while it starts (its stream is bounded
by its backlog, `storage/watch.py`). Bulk work inside a handler gives the loop back between
slices (`cooperative.Slicer`), so a seat is never a stall of the whole server.

Metrics (``/metrics``): ``apiserver_flowcontrol_current_executing_requests``,
``apiserver_flowcontrol_current_inqueue_requests`` (per level),
``apiserver_flowcontrol_flow_inqueue_requests`` and ``..._flow_executing_requests`` (per
level and flow), ``apiserver_flowcontrol_dispatched_requests_total``,
``apiserver_flowcontrol_rejected_requests_total`` (reason ``queue-full`` / ``time-out``),
``apiserver_flowcontrol_request_wait_duration_seconds`` and
``apiserver_flowcontrol_nominal_limit_seats``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gpushare.apiserver.auth.access import User
from gpushare.apiserver.auth.components import (
    AGENT_USER,
    CONTROLLERS_USER,
    NODE_USER_PREFIX,
    NODES_GROUP,
    TENANCY_USER,
)
from gpushare.apiserver.auth.privilege import REQUEST_USER
from gpushare.apiserver.cooperative import DEFAULT_SLICE_S
from gpushare.apiserver.errors import ApiError

SYSTEM = "system"
WORKLOAD = "workload"
_PLATFORM_USERS = frozenset({CONTROLLERS_USER, AGENT_USER, TENANCY_USER})


@dataclass(frozen=True, slots=True)
class LevelConfig:
    seats: int
    per_flow: int
    queue_length: int

    def __post_init__(self) -> None:
        if self.seats < 1 or self.per_flow < 1 or self.queue_length < 0:
            raise ValueError("seats and per_flow must be >= 1 and queue_length >= 0")


@dataclass(frozen=True, slots=True)
class FlowControlConfig:
    """The server's fairness settings (`ApiServer(fairness=...)`; None turns it all off:
    no queues, bulk work in one go)."""

    system: LevelConfig = LevelConfig(seats=64, per_flow=64, queue_length=1000)
    workload: LevelConfig = LevelConfig(seats=8, per_flow=2, queue_length=200)
    queue_timeout_s: float = 60.0
    #: bulk work (deletecollection, big lists, a watch's initial events) yields the loop
    #: after this many seconds
    slice_s: float = DEFAULT_SLICE_S


def classify(user: User, cluster: str) -> tuple[str, str]:
    """(priority level, flow) of a request by `user` in logical cluster `cluster`."""
    if (user.is_admin or user.name in _PLATFORM_USERS or user.name.startswith(NODE_USER_PREFIX)
            or NODES_GROUP in user.groups):
        return SYSTEM, user.name
    return WORKLOAD, cluster


def platform_write() -> bool:
    """Whether the write being made is the platform's: the server's own (no request) or a
    request of the `system` level (tenant quotas count it but never refuse it)."""
    user = REQUEST_USER.get()
    return user is None or classify(user, "")[0] == SYSTEM


@dataclass(eq=False, slots=True)
class _Level:
    name: str
    config: LevelConfig
    executing: int = 0
    flow_executing: dict[str, int] = field(default_factory=dict)
    queues: dict[str, deque[asyncio.Future[None]]] = field(default_factory=dict)
    #: flows with waiting requests, in the order their turn comes
    turns: deque[str] = field(default_factory=deque)

    @property
    def waiting(self) -> int:
        return sum(len(q) for q in self.queues.values())

    def can_run(self, flow: str) -> bool:
        return (self.executing < self.config.seats
                and self.flow_executing.get(flow, 0) < self.config.per_flow)

    def start(self, flow: str) -> None:
        self.executing += 1
        self.flow_executing[flow] = self.flow_executing.get(flow, 0) + 1

    def finish(self, flow: str) -> None:
        self.executing -= 1
        left = self.flow_executing[flow] - 1
        if left:
            self.flow_executing[flow] = left
        else:
            del self.flow_executing[flow]
        self.dispatch()

    def enqueue(self, flow: str, fut: asyncio.Future[None]) -> bool:
        queue = self.queues.get(flow)
        if queue is None:
            queue = self.queues[flow] = deque()
            self.turns.append(flow)
        if len(queue) >= self.config.queue_length:
            if not queue:
                self._drop(flow)
            return False
        queue.append(fut)
        return True

    def withdraw(self, flow: str, fut: asyncio.Future[None]) -> None:
        queue = self.queues.get(flow)
        if queue is not None and fut in queue:
            queue.remove(fut)
            if not queue:
                self._drop(flow)

    def _drop(self, flow: str) -> None:
        del self.queues[flow]
        self.turns.remove(flow)

    def dispatch(self) -> None:
        """Give free seats to waiting requests, one flow after another."""
        while self.turns and self.executing < self.config.seats:
            for _ in range(len(self.turns)):
                flow = self.turns[0]
                self.turns.rotate(-1)
                if self.flow_executing.get(flow, 0) < self.config.per_flow:
                    break
            else:
                return  # every waiting flow is at its own limit
            queue = self.queues[flow]
            fut = queue.popleft()
            if not queue:
                self._drop(flow)
            if not fut.done():
                self.start(flow)
                fut.set_result(None)


class FlowControl:
    def __init__(self, config: FlowControlConfig) -> None:
        self.config = config
        self.levels = {SYSTEM: _Level(SYSTEM, config.system),
                       WORKLOAD: _Level(WORKLOAD, config.workload)}
        self.dispatched = Counter(
            "apiserver_flowcontrol_dispatched_requests_total",
            "Requests that got a seat, by priority level", ("priority_level",),
            registry=None)
        self.rejected = Counter(
            "apiserver_flowcontrol_rejected_requests_total",
            "Requests refused (429) by priority level and reason", ("priority_level", "reason"),
            registry=None)
        self.wait = Histogram(
            "apiserver_flowcontrol_request_wait_duration_seconds",
            "Time requests waited in their queue, by priority level", ("priority_level",),
            registry=None,
            buckets=(0.0, 0.001, 0.005, 0.025, 0.1, 0.5, 2.0, 10.0, 60.0))

    def register(self, registry: CollectorRegistry) -> None:
        for metric in (self.dispatched, self.rejected, self.wait):
            registry.register(metric)
        registry.register(_Gauges(self))

    @contextlib.asynccontextmanager
    async def seat(self, user: User, cluster: str) -> AsyncIterator[None]:
        """Hold a seat of the request's level while the body runs (waiting for one first)."""
        name, flow = classify(user, cluster)
        level = self.levels[name]
        if level.can_run(flow) and flow not in level.queues:
            level.start(flow)
            self.wait.labels(name).observe(0.0)
        else:
            await self._queue(level, flow)
        self.dispatched.labels(name).inc()
        try:
            yield
        finally:
            level.finish(flow)

    async def _queue(self, level: _Level, flow: str) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if not level.enqueue(flow, fut):
            self.rejected.labels(level.name, "queue-full").inc()
            raise _too_many(level.name, flow, "its queue is full")
        began = time.perf_counter()
        try:
            await asyncio.wait_for(asyncio.shield(fut), self.config.queue_timeout_s)
        except BaseException as e:
            if fut.done() and not fut.cancelled():
                level.finish(flow)  # the seat came as the wait ended: give it back
            else:
                fut.cancel()
                level.withdraw(flow, fut)
            if isinstance(e, TimeoutError):
                self.rejected.labels(level.name, "time-out").inc()
                raise _too_many(level.name, flow, "it waited too long in its queue") from e
            raise
        finally:
            self.wait.labels(level.name).observe(time.perf_counter() - began)


def _too_many(level: str, flow: str, why: str) -> ApiError:
    e = ApiError(429, f"too many requests from {flow!r} (priority level {level!r}): {why}; "
                      "please try again later", "TooManyRequests", {"retryAfterSeconds": 1})
    return e


class _Gauges(Collector):
    def __init__(self, flow: FlowControl) -> None:
        self.flow = flow

    def collect(self) -> Iterator[GaugeMetricFamily]:
        levels = self.flow.levels.values()
        specs = (
            ("current_executing_requests", "Requests running now",
             lambda lv: lv.executing),
            ("current_inqueue_requests", "Requests waiting for a seat", lambda lv: lv.waiting),
            ("nominal_limit_seats", "Requests a level runs at once",
             lambda lv: lv.config.seats),
        )
        for suffix, doc, value in specs:
            g = GaugeMetricFamily(f"apiserver_flowcontrol_{suffix}", doc,
                                  labels=["priority_level"])
            for lv in levels:
                g.add_metric([lv.name], float(value(lv)))
            yield g
        waiting = GaugeMetricFamily("apiserver_flowcontrol_flow_inqueue_requests",
                                    "Requests waiting, by priority level and flow (tenant)",
                                    labels=["priority_level", "flow"])
        running = GaugeMetricFamily("apiserver_flowcontrol_flow_executing_requests",
                                    "Requests running, by priority level and flow (tenant)",
                                    labels=["priority_level", "flow"])
        for lv in levels:
            for flow, queue in lv.queues.items():
                waiting.add_metric([lv.name, flow], float(len(queue)))
            for flow, n in lv.flow_executing.items():
                running.add_metric([lv.name, flow], float(n))
        yield waiting
        yield running
