"""MPS server faults: found, blamed on a pod, recovered from.

A fatal GPU fault in one MPS client (an illegal address, say) is delivered to every client
of the same server; the server then refuses new clients (`cudaErrorMpsServerNotReady`)
until all of them have exited, and a client that does not exit keeps it so for ever
(NVIDIA's MPS guide, error containment). Each pass of `MpsFaultHandler`:

* asks every GPU's daemon for its servers and their status and clients, and remembers which
  pod each client process belongs to (a client that faulted has often exited by the time
  the daemon says FAULT, so its pod is known from an earlier pass);
* for a server newly in FAULT: the pod(s) whose processes the server's log names are to
  blame (when the log names none, the report says the cause is unknown rather than guess);
  every pod with a client on that server has lost its CUDA context, so each is restarted by
  its restart policy through the one stop path (`mps.end_gpu_work`, then the signals) and
  the report goes to `notify` (the agent makes Events on the pods and the Node and counts
  it in a metric);
* a server still in FAULT `stuck_s` after that, with its pods' clients gone, has its daemon
  restarted (the report says so); clients still left on it (no pod's) are first ended
  with `terminate_client`, whatever `--mps-stop` says: the server already took every
  client's context, so there is no healthy neighbour to lose.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gpushare.agent.gpu.mps import FAULT, MpsManager, fault_clients
from gpushare.agent.runtime.monitor import GpuMonitor, WatchedPod

GPU_FAULT = "GPUFault"  # the pod whose process faulted
NEIGHBOUR_FAULT = "GPUFaultOfNeighbour"  # a pod that lost its context to another's fault


@dataclass(frozen=True, slots=True)
class FaultReport:
    gpu: int
    server: int
    culprits: tuple[str, ...]  # pods (namespace/name) the server's log blames
    blamed_pids: tuple[int, ...]
    affected: tuple[str, ...]  # pods whose CUDA context the fault took (restarted)
    log: tuple[str, ...]
    action: str  # "restarted pods" or "restarted the MPS daemon"

    @property
    def message(self) -> str:
        if self.culprits:
            cause = (f"a fatal GPU fault in pod {', '.join(self.culprits)} (processes "
                     f"{list(self.blamed_pids)})")
        elif self.blamed_pids:
            cause = (f"a fatal GPU fault in processes {list(self.blamed_pids)}, which "
                     "belong to no pod of this node")
        else:
            cause = "a fatal GPU fault whose client the MPS server's log does not name"
        return f"the MPS server {self.server} of GPU {self.gpu} went into FAULT after {cause}"

    def as_dict(self) -> dict[str, object]:
        return {"gpu": self.gpu, "server": self.server, "culprits": list(self.culprits),
                "blamed_pids": list(self.blamed_pids), "affected": list(self.affected),
                "log": list(self.log), "action": self.action, "message": self.message}


@dataclass(slots=True)
class _Seen:
    since: float
    restarted: bool = False


@dataclass(slots=True)
class MpsFaultHandler:
    mps: MpsManager
    pods: Callable[[], list[WatchedPod]]
    notify: Callable[[FaultReport], None]
    stuck_s: float = 30.0
    clock: Callable[[], float] = time.monotonic
    # client pid -> (gpu, server, pod) of the clients seen in the last pass (and, for a
    # server in FAULT, in the passes before)
    _owners: dict[int, tuple[int, int, str]] = field(default_factory=dict)
    _last: dict[int, tuple[int, int, str]] = field(default_factory=dict)
    _faulted: dict[tuple[int, int], _Seen] = field(default_factory=dict)

    def once(self) -> list[FaultReport]:
        pods = self.pods()
        by_key = {p.key: p for p in pods}
        owner_of = GpuMonitor.owner_lookup(pods)
        reports: list[FaultReport] = []
        faulting: set[tuple[int, int]] = set()
        recent = self.mps.log_lines()
        servers = self.mps.all_servers()
        kept = {(g, s.pid) for g, s in servers if s.status == FAULT}
        current: dict[int, tuple[int, int, str]] = {}
        for gpu, server in servers:
            for pid in server.clients:
                owner = owner_of(pid)
                if owner is not None:
                    current[pid] = (gpu, server.pid, owner)
        faulted = {pid: seen for pid, seen in self._owners.items() if seen[:2] in kept}
        # the clients of the last pass too: one that faulted may have exited since
        self._owners = {**self._last, **faulted, **current}
        self._last = current
        for gpu, server in servers:
            if server.status != FAULT and not self.mps.log_says_faulting(gpu, server.pid):
                continue
            key = (gpu, server.pid)
            faulting.add(key)
            seen = self._faulted.get(key)
            if seen is None:
                self._faulted[key] = _Seen(self.clock())
                reports.append(self._recover(gpu, server.pid, server.clients, recent.get(gpu, []),
                                             owner_of, by_key))
            elif not seen.restarted and self.clock() - seen.since >= self.stuck_s:
                seen.restarted = True
                self.mps.end_clients(server.clients)
                self.mps.restart(gpu)
                reports.append(FaultReport(gpu, server.pid, (), (), (), (),
                                           "restarted the MPS daemon"))
        for key in set(self._faulted) - faulting:
            del self._faulted[key]
        for report in reports:
            self.notify(report)
        return reports

    def _recover(self, gpu: int, server: int, clients: tuple[int, ...], lines: list[str],
                 owner_of: Callable[[int], str | None],
                 by_key: dict[str, WatchedPod]) -> FaultReport:
        ours = {pid for pid, (g, s, _) in self._owners.items() if (g, s) == (gpu, server)}
        blamed = tuple(p for p in fault_clients(lines) if p in ours or p in clients)
        culprits = sorted({o for p in blamed if (o := self._owner(p, owner_of)) is not None})
        affected = {o for p in clients if (o := self._owner(p, owner_of)) is not None}
        affected |= {pod for pid, (g, s, pod) in self._owners.items() if (g, s) == (gpu, server)}
        report = FaultReport(gpu, server, tuple(culprits), blamed, tuple(sorted(affected)),
                             tuple(line for line in lines if line), "restarted pods")
        for key in sorted(affected):
            pod = by_key.get(key)
            if pod is None or pod.supervisor.finished:
                continue
            reason = GPU_FAULT if key in culprits else NEIGHBOUR_FAULT
            pod.supervisor.gpu_fault(reason, report.message)
        return report

    def _owner(self, pid: int, owner_of: Callable[[int], str | None]) -> str | None:
        known = self._owners.get(pid)
        return known[2] if known is not None else owner_of(pid)
