"""All controllers in one process, each on its own thread, sharing one informer per
resource: ``gpushare controllers --kubeconfig K``."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from prometheus_client import REGISTRY, CollectorRegistry, Gauge

from gpushare.controllers.events import EventRecorder
from gpushare.controllers.job_controller import JobController
from gpushare.controllers.pod_grouper import SCHEDULER_NAMES, PodGrouper
from gpushare.controllers.queue_status import QueueStatusController
from gpushare.controllers.scheduler_loop import SchedulerLoop
from gpushare.controllers.static_node_pods import StaticNodePods
from gpushare.controllers.workload_controllers import (
    DeploymentController,
    ReplicaSetController,
    ReplicationControllerController,
)
from gpushare.kube.client import KubeClient, Stopper
from gpushare.kube.informers import InformerFactory
from gpushare.kube.metrics_push import MetricsPusher, union_registry
from gpushare.scheduler.config import Config

log = logging.getLogger(__name__)

# No garbage collector: the embedded API server collects dependents of deleted (or never
# existing) owners itself, as kube-controller-manager does on a real cluster.
ALL = ("pod-grouper", "job-controller", "replicaset-controller", "deployment-controller",
       "replicationcontroller-controller", "scheduler", "queue-status", "static-node-pods",
       "node-lifecycle", "tenancy", "pod-gc", "endpoints-controller",
       "disruption-controller", "cronjob-controller", "statefulset-controller",
       "daemonset-controller")
DEFAULT = ALL


@dataclass
class ControllerSet:
    client: KubeClient
    stopper: Stopper
    informers: InformerFactory
    events: EventRecorder
    controllers: dict[str, object] = field(default_factory=dict)
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
    if "pod-grouper" in enabled:
        out.controllers["pod-grouper"] = PodGrouper(
            client, informers, stopper, events, scheduler_names=scheduler_names
        )
    if "job-controller" in enabled:
        out.controllers["job-controller"] = JobController(client, informers, stopper, events)
    if "replicaset-controller" in enabled:
        out.controllers["replicaset-controller"] = ReplicaSetController(
            client, informers, stopper, events
        )
    if "replicationcontroller-controller" in enabled:
        out.controllers["replicationcontroller-controller"] = ReplicationControllerController(
            client, informers, stopper, events
        )
    if "deployment-controller" in enabled:
        out.controllers["deployment-controller"] = DeploymentController(
            client, informers, stopper, events
        )
    if "endpoints-controller" in enabled:
        from gpushare.controllers.endpoints import EndpointsController

        out.controllers["endpoints-controller"] = EndpointsController(client, informers, stopper)
    if "cronjob-controller" in enabled:
        from gpushare.controllers.cronjobs import CronJobController

        out.controllers["cronjob-controller"] = CronJobController(client, informers, stopper,
                                                                  events)
    if "statefulset-controller" in enabled:
        from gpushare.controllers.statefulsets import StatefulSetController

        out.controllers["statefulset-controller"] = StatefulSetController(
            client, informers, stopper, events)
    if "daemonset-controller" in enabled:
        from gpushare.controllers.daemonsets import DaemonSetController

        out.controllers["daemonset-controller"] = DaemonSetController(client, informers,
                                                                      stopper, events)
    if "disruption-controller" in enabled:
        from gpushare.controllers.disruption import DisruptionController

        out.controllers["disruption-controller"] = DisruptionController(client, informers,
                                                                        stopper)
    if "pod-gc" in enabled:
        from gpushare.controllers.pod_gc import PodGC

        out.controllers["pod-gc"] = PodGC(client, informers, stopper)
    if "static-node-pods" in enabled:
        out.controllers["static-node-pods"] = StaticNodePods(client, informers, stopper)
    if "scheduler" in enabled or "queue-status" in enabled:
        loop = SchedulerLoop(client, informers, stopper, events, scheduler_names=scheduler_names,
                             config=scheduler_config)
        out.registry = loop.metrics.registry
        if "scheduler" in enabled:
            out.controllers["scheduler"] = loop
        if "queue-status" in enabled:
            out.controllers["queue-status"] = QueueStatusController(
                client, informers, stopper, loop
            )
    if "tenancy" in enabled:
        # Virtual clusters: their syncers and the tenants' own workload controllers.
        from gpushare.tenancy.controller import TenancyController

        out.controllers["tenancy"] = TenancyController(client, informers, stopper, kubeconfig,
                                                       tenant_kubeconfig=tenant_kubeconfig)
    _process_gauges(out)
    informers.start()
    if not informers.wait_synced(sync_timeout):
        out.stop()
        raise TimeoutError(f"the caches did not fill within {sync_timeout:.0f}s")
    events.start()
    for name, controller in out.controllers.items():
        out.threads.extend(controller.start())  # type: ignore[attr-defined]
        log.info("started %s", name)
    if "node-lifecycle" in enabled:
        # Nodes whose agent stops heartbeating turn Unknown (the agent side's controller).
        from gpushare.controllers import node_lifecycle

        thread = threading.Thread(
            target=node_lifecycle.run, args=(client, stopper.event),
            name="node-lifecycle", daemon=True,
        )
        thread.start()
        out.threads.append(thread)
        log.info("started node-lifecycle")
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
    loop = out.scheduler
    if loop is not None:
        Gauge("gpushare_scheduler_pending_deltas", "Watched changes not yet applied to the "
              "scheduler's state", registry=r).set_function(lambda: float(len(loop._deltas)))
