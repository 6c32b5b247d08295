"""The agent process: registers the Node, watches the pods bound to it, runs them, enforces
GPU shares and reports status, usage and logs. Everything it learns or says goes through the
Kubernetes API (the shared JSON client, `gpushare.kube.client`), except logs, exec, attach
and port-forward, which the API server reaches through the agent's HTTPS node endpoint
(`nodeserver`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gpushare.agent.endpoint.nodeserver import NodeHandlers, NodeServer
from gpushare.agent.endpoint.podexec import exec_in_pod
from gpushare.agent.endpoint.streams import ExecTarget
from gpushare.agent.gpu.enforcement import Enforcement
from gpushare.agent.gpu.gpu_share import (
    GpuAssignmentError,
    GpuShare,
    share_from_annotations,
)
from gpushare.agent.gpu.nvml import NvmlBackend
from gpushare.agent.gpu.watchdog import ComputeViolation, Violation
from gpushare.agent.node import node as nodes
from gpushare.agent.node.inventory import GpuInventory, HostResources
from gpushare.agent.node.nodeauth import CallerCheck
from gpushare.agent.node.nodecert import NodeTls, ensure_serving_certificate
from gpushare.agent.pods import ledger
from gpushare.agent.pods.apivalues import ApiValues
from gpushare.agent.pods.statuswriter import StatusSink, StatusWriter
from gpushare.agent.runtime import sandbox as sb
from gpushare.agent.runtime.gpuguard import GpuGuard
from gpushare.agent.runtime.gpuusage import UsageReport
from gpushare.agent.runtime.leftovers import kill_leftovers, kill_unrecorded
from gpushare.agent.runtime.logstore import META_DIR, pod_dir, pods_root
from gpushare.agent.runtime.monitor import GpuMonitor, WatchedPod
from gpushare.agent.runtime.network.addressing import NetworkError
from gpushare.agent.runtime.network.podnet import open_network
from gpushare.agent.runtime.planning import make_planner
from gpushare.agent.runtime.podlimits import PodLimits
from gpushare.agent.runtime.podresources import (
    PodResources,
    Refused,
    ResourceConfig,
    remove_pod_directory,
)
from gpushare.agent.runtime.serviceaccount import ServiceAccountTokens
from gpushare.agent.runtime.stdio import ContainerStdin
from gpushare.agent.runtime.supervisor import PodSupervisor, SupervisorConfig
from gpushare.agent.runtime.telemetry import AgentMetrics, AgentTelemetry, ContainerGroup, PodView
from gpushare.api import shapes
from gpushare.api.contracts import GPU_USAGE_ANNOTATION
from gpushare.api.objects import Meta
from gpushare.api.timefmt import rfc3339, rfc3339_micro
from gpushare.kube.client import (
    NODES,
    PODS,
    ApiError,
    KubeClient,
    Stopper,
)
from gpushare.kube.informer import Informer
from gpushare.kube.lease import renew_node_lease

log = logging.getLogger("gpushare.agent")

INHERITED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "USER", "LD_LIBRARY_PATH")
INHERITED_PREFIXES = ("NCCL_", "NVSHMEM_", "TORCH_SYMM")  # safety settings of the host
ANN_POD_USAGE = GPU_USAGE_ANNOTATION
FINAL_PHASES = ("Succeeded", "Failed")


@dataclass(slots=True)
class AgentConfig:
    node_name: str
    data_dir: Path
    address: str = "127.0.0.1"
    port: int = 0
    heartbeat_s: float = 5.0
    monitor_s: float = 1.0
    usage_report_s: float = 5.0
    watch_timeout_s: int = 30
    tolerance_fraction: float = 0.05
    tolerance_mib: int = 512
    #: The compute watchdog (NVML per-process utilisation) for fractional pods whose work
    #: no MPS server limits: evict, event (report only) or off.
    compute_policy: str = "evict"
    compute_tolerance_percent: int = 10
    compute_passes: int = 5  # monitor passes in a row over the share before it acts
    shutdown_grace_s: float = 30.0  # the most a pod's grace period gets when the node stops
    supervisor: SupervisorConfig = field(default_factory=SupervisorConfig)
    version: str = "0.1.0"
    #: Seconds between measurements sent to the control plane (/metrics, kubectl top);
    #: 0 sends none.
    telemetry_s: float = 5.0
    #: How long to wait for the serving certificate to be approved and signed.
    certificate_timeout_s: float = 300.0
    #: Seconds between checks of the serving certificate's remaining life (renewed when a
    #: fifth of it is left).
    certificate_check_s: float = 3600.0
    #: The pods' isolation: auto (the strongest that works), bwrap, setuid or none.
    sandbox: str = "auto"
    #: Directories no pod may see besides the data directory (the kubeconfig's).
    sandbox_hidden: tuple[Path, ...] = ()
    #: Cgroup limits, volumes, local storage (runtime/podresources.py).
    resources: ResourceConfig = field(default_factory=ResourceConfig)
    #: Host paths pods may read though the sandbox hides their place (--sandbox-read-only).
    sandbox_read_only: tuple[Path, ...] = ()
    #: The pods' network: auto (isolated when the node can), isolated, or host.
    pod_network: str = "auto"
    #: The node's pod CIDR (auto: 10.244.<n>.0/24, the first free n from the data dir's).
    pod_cidr: str = "auto"


# How long forgetting a pod waits for its processes to end (SIGKILL, then the reaping).
FORGET_WAIT_S = 10.0


@dataclass(slots=True)
class _Running:
    supervisor: PodSupervisor
    share: GpuShare | None
    namespace: str
    name: str
    sandbox: sb.SandboxState | None = None


class Agent:
    def __init__(
        self,
        kube: KubeClient,
        config: AgentConfig,
        inventory: GpuInventory,
        host: HostResources,
        enforcement: Enforcement,
        nvml: NvmlBackend | None = None,
    ) -> None:
        self.kube = kube
        self.config = config
        self.inventory = inventory
        self.host = host
        self.enforcement = enforcement
        self.nvml = nvml
        self._pods: dict[str, _Running] = {}  # by uid
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._writes_stop = threading.Event()  # set once the pods' last statuses are queued
        # The pods bound to this node, listed and watched by the shared informer.
        self._pod_stopper = Stopper()
        self._pod_informer = Informer(kube, PODS, self._pod_stopper,
                                      field_selector=self._on_this_node,
                                      watch_timeout_seconds=config.watch_timeout_s)
        self._skipped: set[str] = set()  # uids of pods skipped as malformed (event sent)
        self.writer = StatusWriter(kube, config.node_name, self._writes_stop)
        self._writes = self.writer.writes
        self._values = ApiValues(kube)
        self._threads: list[threading.Thread] = []
        self._ready_since = time.time()
        self.metrics = AgentMetrics(config.node_name, inventory, enforcement.annotation)
        self.usage = UsageReport(kube, config.node_name, self._writes, inventory, nvml,
                                 self.metrics, config.usage_report_s)
        self._telemetry_stop = Stopper()
        self.telemetry: AgentTelemetry | None = None
        if config.telemetry_s > 0:
            self.telemetry = AgentTelemetry(kube, self.metrics, inventory, self.pod_views,
                                            lambda: self.usage.gpu_mib, self._telemetry_stop,
                                            config.telemetry_s)
        self.monitor: GpuMonitor | None = None
        if nvml is not None and enforcement.watchdog:
            self.monitor = GpuMonitor(
                nvml,
                inventory,
                self._watched,
                self._on_kill,
                config.tolerance_fraction,
                config.tolerance_mib,
                compute_policy=config.compute_policy,
                mps_clients=enforcement.mps.clients if enforcement.mps is not None else None,
                compute_tolerance_percent=config.compute_tolerance_percent,
                compute_passes=config.compute_passes,
                on_compute_kill=self._on_compute_kill,
            )
        self.gpu = GpuGuard(enforcement.mps, self._watched, self.node_event, self.metrics)
        self.node_server: NodeServer | None = None
        self.sandbox = sb.open_for_pods(
            sb.choose_policy(config.sandbox, [config.data_dir, *config.sandbox_hidden],
                             config.sandbox_read_only),
            config.data_dir, pods_root(config.data_dir))
        self.tokens = ServiceAccountTokens(kube, self.event)
        self.resources = PodResources(  # on the pods whose processes have not ended
            kube, config.node_name, config.data_dir, config.resources,
            lambda: [(k, p) for k, p in self.pods().items() if p.holds_gpu], self.heartbeat)
        self.network = open_network(kube, config.pod_network, config.pod_cidr,
                                    config.data_dir)
        pods_root(config.data_dir).mkdir(parents=True, exist_ok=True)

    # --- lifecycle ------------------------------------------------------------------

    @property
    def node_port(self) -> int:
        """The port of the HTTPS node endpoint (logs, exec, attach, port-forward)."""
        assert self.node_server is not None, "start() the agent first"
        return self.node_server.port

    def _serving_certificate(self) -> NodeTls:
        return ensure_serving_certificate(
            self.kube, self.config.node_name, self.config.address, default_hostname(),
            self.config.data_dir / "pki", self.config.certificate_timeout_s)

    def renew_certificate(self) -> bool:
        """Ask for a new serving certificate when the one served has a fifth of its life
        left; the node endpoint serves it from the next connection. Whether it changed."""
        assert self.node_server is not None
        before = self.node_server.tls.cert.read_bytes()
        tls = self._serving_certificate()
        if tls.cert.read_bytes() == before:
            return False
        self.node_server.reload(tls)
        log.info("serving certificate of node %s renewed", self.config.node_name)
        return True

    def _certificate_loop(self) -> None:
        while not self._stop.wait(self.config.certificate_check_s):
            try:
                self.renew_certificate()
            except Exception as exc:  # the API may be away, or nobody approved yet
                log.warning("serving certificate renewal failed: %s", exc)

    def _start_node_server(self) -> NodeServer:
        tls = self._serving_certificate()
        server = NodeServer(
            NodeHandlers(self._locate, self._container_running, self._exec_target,
                         self._stdin, self.pod_netns), tls,
            CallerCheck(self.kube, self.config.node_name).check, self.config.address,
            self.config.port)
        server.start()
        return server

    def start(self) -> None:
        self.node_server = self._start_node_server()
        try:
            self.network.start()
            self.register()
            self._adopt_or_clean()
        except BaseException:
            self.node_server.stop()
            raise
        for target, name in (
            (self._heartbeat_loop, "heartbeat"),
            (self.writer.run, "status writer"),
            (self._monitor_loop, "gpu monitor"),
            (self._certificate_loop, "certificate renewal"),
            (lambda: self.resources.run(self._stop), "storage and volumes"),
        ):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        self._pod_informer.add_handler(self._on_pod_event)
        self._pod_informer.start()
        if self.telemetry is not None:
            self._threads.append(self.telemetry.start())
        log.info(
            "agent for node %s started; node endpoint (HTTPS) on port %d; enforcement: %s; "
            "sandbox: %s",
            self.config.node_name,
            self.node_port,
            self.enforcement.annotation,
            self.sandbox.describe(),
        )

    def stop(self, stop_pods: bool = False) -> None:
        """Stop the agent. With `stop_pods`, end the pods' processes like a node going down
        (the pods stay; a restarted agent restarts them by their policy); without, leave them
        running for a restarted agent to adopt."""
        self._stop.set()
        self._pod_stopper.stop()
        self._pod_informer.stop()
        self._telemetry_stop.stop()
        if stop_pods:
            with self._lock:
                running = list(self._pods.values())
            for entry in running:
                entry.supervisor.shutdown(self.config.shutdown_grace_s)
            for entry in running:
                entry.supervisor.wait(self.config.shutdown_grace_s + 15)
        self._writes_stop.set()  # the writer sends what is queued, then ends
        deadline = time.monotonic() + 5
        while not self._writes.empty() and time.monotonic() < deadline:
            time.sleep(0.05)
        with contextlib.suppress(Exception):
            self.kube.api_client.rest_client.pool_manager.clear()
        # the pod watch may sit in a long request: it is a daemon thread, so don't wait long
        deadline = time.monotonic() + 2
        for thread in self._threads:
            thread.join(timeout=max(0.05, deadline - time.monotonic()))
        self._pod_informer.join(timeout=max(0.05, deadline - time.monotonic()))
        if self.node_server is not None:
            self.node_server.stop()
        # pods left running keep their MPS daemon (a restarted agent finds it alive)
        with self._lock:
            busy = any(not e.supervisor.finished for e in self._pods.values())
        if self.enforcement.mps is not None and (stop_pods or not busy):
            self.enforcement.mps.stop_all()
        self.network.stop(teardown=stop_pods or not busy)  # running pods keep theirs

    def wait(self) -> None:
        while not self._stop.wait(1.0):
            pass

    # --- the Node -------------------------------------------------------------------

    def _node_object(self) -> dict[str, Any]:
        body = nodes.node_object(
            self.config.node_name,
            self.inventory,
            self.host,
            self.enforcement.annotation,
            self.config.address,
            self.node_port,
            time.time(),
            self.config.version,
            self._sandbox_summary(),
        )
        body["status"]["conditions"] += self.resources.conditions(time.time(), self._ready_since)
        return body

    def _sandbox_summary(self) -> tuple[str, str]:
        return self.sandbox.mode, self.sandbox.describe()

    def register(self) -> None:
        body = self._node_object()
        node = NODES.item(self.config.node_name)
        existing = self.kube.get(node)
        if existing is None:
            try:
                self.kube.create(NODES.collection(), body)
            except ApiError as exc:
                if not exc.conflict:
                    raise
        else:
            self.kube.merge_patch(
                node,
                {
                    "metadata": {
                        "labels": Meta.of(body).labels,
                        "annotations": Meta.of(body).annotations,
                    }
                },
            )
        self._ready_since = time.time()
        body["status"]["conditions"].append(self._network_condition())
        self._patch_node_status({"status": body["status"]})
        with contextlib.suppress(ApiError):  # the node's pod CIDR, as a kubelet's Node
            self.kube.merge_patch(node, {"spec": self.network.node_spec()})

    def _network_condition(self) -> dict[str, Any]:
        return self.network.condition(rfc3339(time.time()), rfc3339(self._ready_since))

    def heartbeat(self) -> None:
        now = time.time()
        try:
            self._patch_node_status(
                {
                    "status": {
                        "conditions": [
                            nodes.ready_condition(now, self._ready_since),
                            nodes.sandbox_condition(*self._sandbox_summary(), now,
                                                    self._ready_since),
                            *self.resources.conditions(now, self._ready_since),
                            self._network_condition(),
                        ],
                        "daemonEndpoints": {"kubeletEndpoint": {"Port": self.node_port}},
                    }
                },
            )
        except ApiError as exc:
            if exc.not_found:  # someone deleted the Node: register again
                self.register()
            else:
                raise
        lease_s = max(1, round(self.config.heartbeat_s * 4))
        renew_node_lease(
            self.kube, self.config.node_name, self.config.node_name, lease_s, rfc3339_micro(now)
        )

    def _patch_node_status(self, patch: dict[str, Any]) -> None:
        self.kube.merge_patch(NODES.item(self.config.node_name, sub="status"), patch)

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self.config.heartbeat_s):
            try:
                self.heartbeat()
            except Exception as exc:  # the API may be restarting: keep trying
                log.warning("heartbeat failed: %s", exc)
            self._refresh_tokens()

    # --- pods -----------------------------------------------------------------------

    def _adopt_or_clean(self) -> None:
        """After a restart: pods still bound here are picked up by `_sync`, which adopts
        their recorded processes; directories of pods that are gone get their processes
        killed and are removed."""
        pods, _ = self._list_pods()
        live = {
            (meta.namespace or "default", meta.name): meta.uid
            for meta in (Meta.of(p) for p in pods)
        }
        self.network.cleanup(uid for uid in live.values() if uid)
        root = pods_root(self.config.data_dir)
        gone: list[Path] = []
        for ns_dir in root.iterdir() if root.is_dir() else []:
            for directory in ns_dir.iterdir():
                uid = _recorded_uid(directory)
                if live.get((ns_dir.name, directory.name)) != uid or uid is None:
                    gone.append(directory)
                    killed = kill_leftovers(directory, self.gpu.end_gpu_work)
                    if killed:
                        log.info(
                            "killed leftover process groups %s of %s/%s",
                            killed,
                            ns_dir.name,
                            directory.name,
                        )
                    self.resources.clean_directory(directory)
                    remove_pod_directory(directory)
                elif killed := kill_unrecorded(directory, self.gpu.end_gpu_work):
                    # started by an agent that died before recording them: the pod's
                    # supervisor starts its containers again, once
                    log.info("killed unrecorded process groups %s of %s/%s", killed,
                             ns_dir.name, directory.name)
        self.resources.clean(str(u) for u in live.values() if u)

    def _on_pod_event(self, kind: str, pod: dict[str, Any], old: dict[str, Any] | None) -> None:
        """A change of a pod bound here, from the informer (its first list gives every pod
        as ADDED; a relist after the server compacted gives only what changed)."""
        meta = Meta.of(pod)
        if kind == "DELETED":
            self._forget(meta.uid)
            return
        if old is not None:
            before = Meta.of(old).uid
            if before != meta.uid:
                self._forget(before)  # deleted and created again under the same name
        self._sync_guarded(pod)

    @property
    def _on_this_node(self) -> str:
        return f"spec.nodeName={self.config.node_name}"

    def _list_pods(self) -> tuple[list[dict[str, Any]], str]:
        """The pods bound to this node, and the list's resourceVersion to watch from."""
        body = self.kube.list(PODS.collection(), fieldSelector=self._on_this_node)
        version = Meta.of(body).resource_version
        return list(body.get("items") or []), version

    def _sync_guarded(self, pod: dict[str, Any]) -> None:
        """`_sync`, but a pod the agent cannot run (a malformed spec stored before
        validation: the API server's shape rules name its fields) is skipped with a Warning
        event, once, and the other pods go on."""
        causes = shapes.pod_causes(pod)
        if causes:
            self._skip(pod, "; ".join(f"{c.field}: {c.message}" for c in causes[:5]))
            meta = Meta.of(pod)
            if meta.deleting and meta.name:
                # never run here (or no longer readable): stop what runs, finish the delete
                self._forget(meta.uid)
                self._writes.put(("delete", meta.namespace or "default",
                                  meta.name, meta.uid, None))
            return
        try:
            self._sync(pod)
        except Exception as exc:
            self._skip(pod, repr(exc))

    def _skip(self, pod: dict[str, Any], why: str) -> None:
        meta = Meta.of(pod)
        uid = meta.uid
        log.warning("skipping pod %s/%s: it cannot be run: %s", meta.namespace,
                    meta.name, why)
        if uid not in self._skipped:
            self._skipped.add(uid)
            self.event(pod, "FailedCreatePodSandBox", f"the pod cannot be run by this agent: {why}")

    def _admit(self, pod: dict[str, Any], directory: Path
               ) -> tuple[GpuShare | None, PodLimits | None] | None:
        """The node's admission (the kubelet's): its GPU share fits beside the running
        pods', its network and limits can be given. None: refused (the pod Failed, why)."""
        try:
            share = share_from_annotations(Meta.of(pod).annotations, self.inventory)
        except GpuAssignmentError as exc:
            self._fail_unstartable(pod, "UnexpectedAdmissionError", str(exc))
            return None
        refused = ledger.overcommit(
            (e.share for e in self._pods.values() if e.supervisor.holds_gpu), share)
        if refused is not None:
            self._fail_unstartable(pod, ledger.OVERCOMMITTED, refused)
            return None
        if (refused_network := self.network.refusal(pod)) is not None:
            self._fail_unstartable(pod, *refused_network)
            return None
        try:
            return share, self.resources.admit(pod, directory)
        except Refused as refused_pod:
            self._fail_unstartable(pod, refused_pod.reason, str(refused_pod))
            return None

    def _sync(self, pod: dict[str, Any]) -> None:
        meta = Meta.of(pod)
        uid = meta.uid
        namespace, name = meta.namespace or "default", meta.name
        if (pod.get("spec") or {}).get("nodeName") != self.config.node_name:
            self._forget(uid)
            return
        deleting = meta.deleting
        grace: Any = meta.deletion_grace_seconds
        if grace is None:
            grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
        with self._lock:
            entry = self._pods.get(uid)
            if entry is not None:
                if deleting:
                    entry.supervisor.stop(float(grace) if grace is not None else None)
                return
            phase = (pod.get("status") or {}).get("phase")
            directory = pod_dir(self.config.data_dir, namespace, name)
            recorded = _recorded_uid(directory)
            if recorded is not None and recorded != uid:
                kill_leftovers(directory, self.gpu.end_gpu_work)
                remove_pod_directory(directory)
            if phase in FINAL_PHASES and recorded != uid:
                # finished before this agent saw it (or ran elsewhere): never run it again
                if deleting:
                    self._writes.put(("delete", namespace, name, uid, None))
                return
            if deleting and recorded != uid:
                self._writes.put(("delete", namespace, name, uid, None))
                return
            admitted = self._admit(pod, directory)
            if admitted is None:
                return
            share, limits = admitted
            directory.mkdir(parents=True, exist_ok=True)
            state = self._sandbox_for(pod, directory, share, recorded == uid)
            try:
                state, pod_ip = self.network.sandbox_for(pod, state)
            except NetworkError as exc:
                self._fail_unstartable(pod, "FailedCreatePodSandBox", str(exc))
                return
            volumes = self.resources.volumes_for(pod, directory, self._values,
                                                 self.tokens.request, state)
            supervisor = PodSupervisor(
                pod,
                directory,
                make_planner(
                    self.network.with_address(pod, pod_ip),
                    share,
                    self._runtime_env(pod),
                    self._values,
                    self.enforcement.mps,
                    self.inventory.declared,
                    self.config.address,
                ),
                StatusSink(self._writes, namespace, name, uid, pod_ip),
                self.config.supervisor,
                state,
                limits,
                volumes,
                pod_ip,
                before_signal=self.gpu.end_gpu_work,
            )
            self._pods[uid] = _Running(supervisor, share, namespace, name, state)
            self.gpu.apply_limits()  # the server's limits, before the pod's client starts
            supervisor.start()
            if deleting:
                supervisor.stop(float(grace) if grace is not None else None)

    # --- the sandbox ------------------------------------------------------------------

    def _sandbox_for(self, pod: dict[str, Any], directory: Path, share: GpuShare | None,
                     adopted: bool) -> sb.SandboxState:
        """The pod's sandbox: the recorded one of a pod this agent (or the one before) ran,
        else a new one with the lowest free id; its token written when the pod has one."""
        meta = Meta.of(pod)
        state = sb.load_state(directory) if adopted else None
        if state is None:
            mps_gpu, writable = self._mps_client(share)
            state = sb.new_state(
                self.sandbox, directory, (meta.name or "pod")[:63],
                sb.ids_in_use(pods_root(self.config.data_dir)), mps_gpu,
                sb.gpu_devices(d.index for d in share.devices) if share is not None else (),
                writable)
        sb.prepare(state, pods_root(self.config.data_dir))
        if self.tokens.wanted(pod):
            written = self.tokens.write(pod, state)
            if written != state.service_account:
                state = replace(state, service_account=written)
                sb.save_state(state)
        if not adopted:
            self._writes.put(("annotations", meta.namespace or "default",
                              meta.name, "",
                              {nodes.ANN_SANDBOX: sb.describe_state(state)}))
        return state

    def pod_netns(self, namespace: str, name: str) -> str | None:
        """The network namespace of a pod running here (None: the node's network)."""
        with self._lock:
            uids = [u for u, e in self._pods.items() if (e.namespace, e.name) == (namespace, name)]
        return self.network.netns_of(uids[0]) if uids else None

    def _mps_client(self, share: GpuShare | None) -> tuple[int | None, tuple[str, ...]]:
        """(GPU index, its pipe directory) when the pod will be a client of an MPS daemon."""
        mps = self.enforcement.mps
        if share is None or share.whole or mps is None or len(share.devices) != 1:
            return None, ()
        index = share.devices[0].index
        pipe = mps.pipe_directory(index)
        return (index, (pipe,)) if pipe is not None else (None, ())

    def _refresh_tokens(self) -> None:
        with self._lock:
            entries = [e for e in self._pods.values()
                       if not e.supervisor.finished and e.sandbox is not None
                       and e.sandbox.service_account]
        for entry in entries:
            with contextlib.suppress(Exception):
                self.tokens.refresh(entry.supervisor.pod, entry.sandbox)  # type: ignore[arg-type]

    def _forget(self, uid: str | None) -> None:
        """The pod object is gone: stop whatever still runs for it, and wait (a little)
        until it has: the scheduler may have bound another pod to its GPU share already,
        and the next event may be that pod."""
        with self._lock:
            entry = self._pods.get(uid or "")
        if entry is None:
            return
        entry.supervisor.stop(0)
        entry.supervisor.wait_released(FORGET_WAIT_S)

        def reap() -> None:
            entry.supervisor.wait(60)
            self.resources.release(entry.supervisor)
            with self._lock:
                if self._pods.get(uid or "") is entry:
                    del self._pods[uid or ""]
            self.network.release(uid or "")
            remove_pod_directory(entry.supervisor.directory)

        threading.Thread(target=reap, daemon=True).start()

    def _fail_unstartable(self, pod: dict[str, Any], reason: str, message: str) -> None:
        meta = Meta.of(pod)
        status: dict[str, Any] = {
            "phase": "Failed",
            "reason": reason,
            "message": message,
            "hostIP": self.config.address,
        }
        if reason == ledger.OVERCOMMITTED:
            status["conditions"] = ledger.refused_conditions(message, rfc3339(time.time()))
        self._writes.put(
            ("status", meta.namespace or "default", meta.name, meta.uid, status)
        )
        self.event(pod, reason, message)

    def _runtime_env(self, pod: dict[str, Any]) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if k in INHERITED_ENV or k.startswith(INHERITED_PREFIXES)}
        env["HOSTNAME"] = Meta.of(pod).name
        # as the kubelet: where the API is (the pod's token, if any, is in its sandbox); on
        # its own network, a pod reaches it through the `kubernetes` Service only
        api = urlsplit(self.kube.host)
        if service := self.network.api_env(pod):
            env.update(service)
        elif api.hostname:
            env["KUBERNETES_SERVICE_HOST"] = api.hostname
            env["KUBERNETES_SERVICE_PORT"] = str(
                api.port or (443 if api.scheme == "https" else 80))
        return env

    # --- API writes -----------------------------------------------------------------

    def node_event(self, reason: str, message: str) -> None:
        """An Event on this node's Node object (a Warning)."""
        node = {"kind": "Node", "metadata": {"name": self.config.node_name,
                                             "namespace": "default"}}
        self.event(node, reason, message)

    def event(self, pod: dict[str, Any], reason: str, message: str, kind: str = "Warning") -> None:
        self.writer.event(pod, reason, message, kind)

    # --- GPU watchdog and usage -----------------------------------------------------

    def _watched(self) -> list[WatchedPod]:
        with self._lock:
            return [
                WatchedPod(f"{e.namespace}/{e.name}", e.supervisor, e.share)
                for e in self._pods.values()
            ]

    def _on_kill(self, pod: WatchedPod, violation: Violation) -> None:
        self.metrics.killed()
        self.event(pod.supervisor.pod, "GPUMemoryExceeded", violation.message)

    def _on_compute_kill(self, pod: WatchedPod, violation: ComputeViolation) -> None:
        if self.config.compute_policy == "evict":
            self.metrics.compute_killed()
        self.event(pod.supervisor.pod, "GPUComputeExceeded", violation.message)

    def pod_views(self) -> list[PodView]:
        """The pods with processes running now, for the telemetry."""
        with self._lock:
            entries = [e for e in self._pods.values() if not e.supervisor.finished]
        out = []
        for e in entries:
            key = f"{e.namespace}/{e.name}"
            limits = e.supervisor.limits
            groups = [ContainerGroup(key, name, pgid,
                                     limits.container_cgroup(name) if limits else None)
                      for name, pgid in e.supervisor.container_groups()]
            if groups:  # only pods with processes now hold anything
                out.append(PodView(e.namespace, e.name, e.share, groups))
        return out

    def monitor_once(self) -> list[str]:
        """One watchdog pass; the pods it killed."""
        if self.monitor is None:
            return []
        result = self.monitor.once()
        self.usage.publish(result)
        return [v.pod for v in result.killed]

    def _monitor_loop(self) -> None:
        while not self._stop.wait(self.config.monitor_s):
            try:
                self.monitor_once()
                if self.enforcement.mps is not None:
                    restarted = self.enforcement.mps.supervise()
                    if restarted:
                        log.warning("restarted MPS daemons of GPUs %s", restarted)
                    self.gpu.once()
            except Exception as exc:
                log.warning("GPU monitor pass failed: %s", exc)

    # --- logs, exec, attach -------------------------------------------------------------

    def _locate(self, namespace: str, name: str) -> Path | None:
        directory = pod_dir(self.config.data_dir, namespace, name)
        return directory if (directory / META_DIR).is_dir() else None

    def _container_running(self, namespace: str, name: str, container: str) -> bool:
        entry = self._entry(namespace, name)
        return entry is not None and entry.supervisor.container_running(container)

    def _entry(self, namespace: str, name: str) -> _Running | None:
        with self._lock:
            return next((e for e in self._pods.values()
                         if e.namespace == namespace and e.name == name), None)

    def _stdin(self, namespace: str, name: str, container: str) -> ContainerStdin | None:
        entry = self._entry(namespace, name)
        return entry.supervisor.stdin_for(container) if entry is not None else None

    def _exec_target(self, namespace: str, name: str, container: str,
                     command: list[str]) -> ExecTarget:
        entry = self._entry(namespace, name)
        if entry is None:
            raise LookupError(f'pods "{name}" not found on this node')
        plan = entry.supervisor.exec_plan(container)
        if plan is None:
            raise LookupError(f'container "{container}" in pod "{name}" is not running')
        pgid = dict(entry.supervisor.container_groups()).get(container)
        return exec_in_pod(entry.supervisor.directory, plan, command, entry.sandbox, pgid,
                           entry.supervisor.cgroup_procs(container))

    def pods(self) -> dict[str, PodSupervisor]:
        with self._lock:
            return {f"{e.namespace}/{e.name}": e.supervisor for e in self._pods.values()}


def _recorded_uid(directory: Path) -> str | None:
    import json
    try:
        return json.loads((directory / META_DIR / "state.json").read_text()).get("uid")
    except (OSError, ValueError):
        return None


def default_hostname() -> str:
    return socket.gethostname().split(".")[0].lower()
