"""The agent's keeper of shared GPUs around its pods' processes (only where MPS is used):

* `end_gpu_work(pgids)`: the one stop path's first step for every pod (supervisors call it
  before any signal; leftovers of pods that are gone too): nothing with the default
  `--mps-stop signal`, MPS `terminate_client` with `--mps-stop terminate-client`;
* `apply_limits()`: the server-side limits of each GPU's MPS clients from the pods on it,
  before a pod starts and on every pass (a restarted daemon gets them again);
* `once()`: the fault pass (`gpufaults.MpsFaultHandler`): a server in FAULT is reported as
  an Event on the Node and in a metric; its pods' own Events come from their supervisors.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from gpushare.agent.gpu.mps import EndedClient, MpsManager, end_gpu_work, server_limits
from gpushare.agent.runtime.gpufaults import FaultReport, MpsFaultHandler
from gpushare.agent.runtime.monitor import WatchedPod
from gpushare.agent.runtime.telemetry import AgentMetrics

log = logging.getLogger("gpushare.agent")

MPS_SERVER_FAULT = "MPSServerFault"
MPS_DAEMON_RESTARTED = "MPSDaemonRestarted"


class GpuGuard:
    def __init__(self, mps: MpsManager | None, pods: Callable[[], list[WatchedPod]],
                 node_event: Callable[[str, str], None], metrics: AgentMetrics,
                 stuck_s: float = 30.0) -> None:
        self.mps = mps
        self._pods = pods
        self._node_event = node_event
        self._metrics = metrics
        self.faults = (MpsFaultHandler(mps, pods, self._on_fault, stuck_s=stuck_s)
                       if mps is not None else None)

    def end_gpu_work(self, pgids: Iterable[int]) -> list[EndedClient]:
        ended = end_gpu_work(self.mps, pgids)
        for e in ended:
            self._metrics.mps_client_ended(e.ok)
            if not e.ok:
                log.warning("GPU %d: the MPS server %d did not end client %d: %s", e.gpu,
                            e.server, e.client, e.answer)
        return ended

    def apply_limits(self) -> None:
        if self.mps is None:
            return
        shares = [(p.share.devices[0].index, p.share.thread_percentage, p.share.memory_mib)
                  for p in self._pods()
                  if p.share is not None and not p.share.whole and len(p.share.devices) == 1
                  and not p.supervisor.finished]
        for index in self.mps.apply_limits(server_limits(shares)):
            limits = self.mps.daemons[index].limits
            log.info("GPU %d: MPS server-side limits now %s (thread %%, pinned MiB)", index,
                     limits)

    def once(self) -> list[FaultReport]:
        if self.faults is None:
            return []
        self.apply_limits()
        return self.faults.once()

    def _on_fault(self, report: FaultReport) -> None:
        if report.action == "restarted pods":
            self._metrics.mps_fault(report.gpu)
            pods = ", ".join(report.affected) or "none of this node's"
            self._node_event(MPS_SERVER_FAULT, f"{report.message}; its clients' pods ({pods}) "
                             "lost their CUDA contexts and are restarted by their restart "
                             "policy")
        else:
            self._metrics.mps_daemon_restart(report.gpu)
            self._node_event(MPS_DAEMON_RESTARTED, f"the MPS server {report.server} of GPU "
                             f"{report.gpu} stayed in FAULT after its pods were restarted: "
                             "its control daemon was restarted")
        log.warning("GPU %d: %s (%s)", report.gpu, report.message, report.action)
