"""All controllers in one process, each on its own thread, sharing one informer per
resource: ``gpushare controllers --kubeconfig K``.

The process's one registry, `CONTROLLERS`, maps each name ``--only`` takes to the factory
that builds it (as kube-controller-manager's and kube-scheduler's registries do). It sits
above `gpushare.controllers` and `gpushare.tenancy`, so that the controllers never import
tenancy."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client import REGISTRY, CollectorRegistry, Gauge

from gpushare.api.contracts import SCHEDULER_NAMES
from gpushare.controllers.controller import Controller
from gpushare.controllers.events import EventRecorder
from gpushare.controllers.nodes import node_lifecycle
from gpushare.controllers.nodes.static_node_pods import StaticNodePods
from gpushare.controllers.scheduling.max_runtime_controller import MaxRuntimeController
from gpushare.controllers.scheduling.pod_grouper import PodGrouper
from gpushare.controllers.scheduling.podgroup_status import PodGroupStatusController
from gpushare.controllers.scheduling.queue_status import QueueStatusController
from gpushare.controllers.scheduling.scheduler_loop import SchedulerLoop
from gpushare.controllers.workloads.cronjobs import CronJobController
from gpushare.controllers.workloads.daemonsets import DaemonSetController
from gpushare.controllers.workloads.disruption import DisruptionController
from gpushare.controllers.workloads.endpoints import EndpointsController
from gpushare.controllers.workloads.job_controller import JobController
from gpushare.controllers.workloads.pod_gc import PodGC
from gpushare.controllers.workloads.statefulsets import StatefulSetController
from gpushare.controllers.workloads.workload_controllers import (
    DeploymentController,
    ReplicaSetController,
    ReplicationControllerController,
)
from gpushare.kube.client import KubeClient, Stopper
from gpushare.kube.informers import InformerFactory
from gpushare.kube.metrics_push import MetricsPusher, union_registry
from gpushare.scheduler.config import Config
from gpushare.tenancy.controller import TenancyController

log = logging.getLogger(__name__)


@dataclass
class Context:
    """What a controller's factory may use: the process's shared client, caches and events,
    and its options."""

    client: KubeClient
    informers: InformerFactory
    stopper: Stopper
    events: EventRecorder
    kubeconfig: str
    scheduler_names: tuple[str, ...]
    scheduler_config: Config | None
    tenant_kubeconfig: str | None
    #: Write each fractional pod's share ConfigMap before binding it (kubelet nodes).
    gpu_share_configmaps: bool = False
    #: The one scheduler loop, shared by ``scheduler`` and ``queue-status``.
    loop: SchedulerLoop | None = None

    def scheduler_loop(self) -> SchedulerLoop:
        if self.loop is None:
            self.loop = SchedulerLoop(self.client, self.informers, self.stopper, self.events,
                                      scheduler_names=self.scheduler_names,
                                      config=self.scheduler_config,
                                      share_configmaps=self.gpu_share_configmaps)
        return self.loop


class _NodeLifecycle:
    """Nodes whose agent stops heartbeating turn Unknown (the agent side's controller)."""

    def __init__(self, client: KubeClient, stopper: Stopper) -> None:
        self._client, self._stopper = client, stopper

    def start(self) -> list[threading.Thread]:
        thread = threading.Thread(
            target=node_lifecycle.run, args=(self._client, self._stopper.event),
            name="node-lifecycle", daemon=True,
        )
        thread.start()
        return [thread]


Factory = Callable[[Context], Controller]

# Every controller by the name ``--only`` takes, in the order they are built and started.
# No garbage collector: the embedded API server collects dependents of deleted (or never
# existing) owners itself, as kube-controller-manager does on a real cluster.
CONTROLLERS: dict[str, Factory] = {
    "pod-grouper": lambda c: PodGrouper(c.client, c.informers, c.stopper, c.events,
                                        scheduler_names=c.scheduler_names),
    "job-controller": lambda c: JobController(c.client, c.informers, c.stopper, c.events),
    "replicaset-controller": lambda c: ReplicaSetController(c.client, c.informers, c.stopper,
                                                            c.events),
    "replicationcontroller-controller": lambda c: ReplicationControllerController(
        c.client, c.informers, c.stopper, c.events),
    "deployment-controller": lambda c: DeploymentController(c.client, c.informers, c.stopper,
                                                            c.events),
    "endpoints-controller": lambda c: EndpointsController(c.client, c.informers, c.stopper),
    "disruption-controller": lambda c: DisruptionController(c.client, c.informers, c.stopper),
    "cronjob-controller": lambda c: CronJobController(c.client, c.informers, c.stopper,
                                                      c.events),
    "statefulset-controller": lambda c: StatefulSetController(c.client, c.informers,
                                                              c.stopper, c.events),
    "daemonset-controller": lambda c: DaemonSetController(c.client, c.informers, c.stopper,
                                                          c.events),
    "pod-gc": lambda c: PodGC(c.client, c.informers, c.stopper),
    "static-node-pods": lambda c: StaticNodePods(c.client, c.informers, c.stopper),
    "scheduler": lambda c: c.scheduler_loop(),
    "queue-status": lambda c: QueueStatusController(c.client, c.informers, c.stopper,
                                                    c.scheduler_loop()),
    "podgroup-status": lambda c: PodGroupStatusController(c.client, c.informers, c.stopper),
    # Jobs past their maximum runtime: evicted, then requeued after a delay or failed.
    "max-runtime": lambda c: MaxRuntimeController(c.client, c.informers, c.stopper, c.events),
    # Virtual clusters: their syncers and the tenants' own workload controllers.
    "tenancy": lambda c: TenancyController(c.client, c.informers, c.stopper, c.kubeconfig,
                                           tenant_kubeconfig=c.tenant_kubeconfig),
    "node-lifecycle": lambda c: _NodeLifecycle(c.client, c.stopper),
}
ALL = tuple(CONTROLLERS)
DEFAULT = ALL


@dataclass
class ControllerSet:
    client: KubeClient
    stopper: Stopper
    informers: InformerFactory
    events: EventRecorder
    controllers: dict[str, Controller] = field(default_factory=dict)
    threads: list[threading.Thread] = field(default_factory=list)
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    pusher: MetricsPusher | None = None

    @property
    def scheduler(self) -> SchedulerLoop | None:
        loop = self.controllers.get("scheduler")
        return loop if isinstance(loop, SchedulerLoop) else None

    def stop(self) -> None:
        self.stopper.stop()
        for controller in self.controllers.values():
            stop = getattr(controller, "stop", None)
            if callable(stop):
                stop()
        self.informers.stop()
        for thread in self.threads:
            thread.join(3.0)
        self.client.close()


def start_controllers(
    kubeconfig: str,
    *,
    enabled: tuple[str, ...] = DEFAULT,
    scheduler_names: tuple[str, ...] = SCHEDULER_NAMES,
    scheduler_config: Config | None = None,
    sync_timeout: float = 30.0,
    metrics_push_interval: float | None = 5.0,
    metrics_port: int | None = None,
    tenant_kubeconfig: str | None = None,
    gpu_share_configmaps: bool = False,
) -> ControllerSet:
    """Build, sync and start the controllers; returns once they run.

    Their Prometheus figures go to the control plane every ``metrics_push_interval``
    seconds (None: not pushed) and, with ``metrics_port``, are served there too. The
    virtual-cluster controller works inside tenant clusters with ``tenant_kubeconfig``
    (default: ``kubeconfig``)."""
    unknown = [name for name in enabled if name not in ALL]
    if unknown:
        raise ValueError(f"unknown controllers {unknown}; known: {', '.join(ALL)}")
    client = KubeClient.from_kubeconfig(kubeconfig)
    stopper = Stopper()
    informers = InformerFactory(client, stopper)
    events = EventRecorder(client, "gpushare-controllers", stopper)
    out = ControllerSet(client, stopper, informers, events)
    context = Context(client, informers, stopper, events, kubeconfig, scheduler_names,
                      scheduler_config, tenant_kubeconfig,
                      gpu_share_configmaps=gpu_share_configmaps)
    for name, factory in CONTROLLERS.items():
        if name in enabled:
            out.controllers[name] = factory(context)
    if context.loop is not None:
        out.registry = context.loop.metrics.registry
    _process_gauges(out)
    informers.start()
    if not informers.wait_synced(sync_timeout):
        out.stop()
        raise TimeoutError(f"the caches did not fill within {sync_timeout:.0f}s")
    events.start()
    for name, controller in out.controllers.items():
        out.threads.extend(controller.start())
        log.info("started %s", name)
    # The process's own collectors and the tenancy figures live in the default registry.
    exported = union_registry(out.registry, REGISTRY)
    if metrics_port is not None:
        from gpushare.kube.metrics_push import serve

        serve(exported, metrics_port)
        log.info("serving metrics on port %d", metrics_port)
    if metrics_push_interval:
        out.pusher = MetricsPusher(client, exported, "controllers", stopper,
                                   interval=metrics_push_interval)
        out.threads.append(out.pusher.start())
    return out


def _process_gauges(out: ControllerSet) -> None:
    """Figures of the controllers process sampled when rendered."""
    r = out.registry
    Gauge("gpushare_controller_events_written", "Events written by the controllers",
          registry=r).set_function(lambda: float(out.events.written))
    status = out.controllers.get("queue-status")
    if isinstance(status, QueueStatusController):
        Gauge("gpushare_queue_status_writes", "Queue status writes", registry=r
              ).set_function(lambda: float(status.writes))
    groups = out.controllers.get("podgroup-status")
    if isinstance(groups, PodGroupStatusController):
        Gauge("gpushare_podgroup_status_writes", "PodGroup resourcesStatus writes",
              registry=r).set_function(lambda: float(groups.writes))
    loop = out.scheduler
    if loop is not None:
        Gauge("gpushare_scheduler_pending_deltas", "Watched changes not yet applied to the "
              "scheduler's state", registry=r).set_function(lambda: float(len(loop._deltas)))
