"""The batch/v1 Job controller: runs a Job's pods and keeps its status.

Pods are matched to their Job by the controller ownerReference (uid). Pods the controller
has just created are remembered until the watch shows them, so a lagging cache never
makes a Job run more pods than its parallelism.
"""

from __future__ import annotations

import logging
import secrets
import string
import threading
import time

from gpushare.api.objects import Meta, Obj, controller_reference
from gpushare.controllers.events import EventRecorder, now_rfc3339
from gpushare.controllers.workloads.jobs import finished_condition, plan_job
from gpushare.kube.client import JOBS, PODS, ApiError, KubeClient, Stopper
from gpushare.kube.informer import WorkQueue, start_workers
from gpushare.kube.informers import InformerFactory

log = logging.getLogger(__name__)

WORKERS = 4  # concurrent reconciles: API round trips overlap

EXPECTATION_SECONDS = 30.0  # forget an unseen create after this long (it may have been lost)
_ALPHABET = string.ascii_lowercase + string.digits


def random_suffix() -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(5))


class JobController:
    name = "job-controller"

    def __init__(
        self, client: KubeClient, informers: InformerFactory, stopper: Stopper,
        events: EventRecorder,
    ) -> None:
        self.client = client
        self.stopper = stopper
        self.events = events
        self.jobs = informers.get(JOBS)
        self.pods = informers.get(PODS)
        self.queue = WorkQueue()
        self.workers = WORKERS
        self._pods_by_job: dict[str, dict[str, Obj]] = {}  # job uid -> pod key -> pod
        self._created: dict[str, dict[str, tuple[float, Obj]]] = {}  # job uid -> unseen creates
        self._lock = threading.Lock()
        self._job_key_by_uid: dict[str, str] = {}
        self.jobs.add_handler(self._on_job)
        self.pods.add_handler(self._on_pod)

    def start(self) -> list[threading.Thread]:
        return start_workers(self.queue, self.reconcile, self.stopper, self.name, self.workers)

    def _on_job(self, kind: str, job: Obj, old: Obj | None) -> None:
        meta = Meta.of(job)
        key = f"{meta.namespace}/{meta.name}"
        uid = meta.uid
        with self._lock:
            if kind == "DELETED":
                self._job_key_by_uid.pop(uid, None)
                self._created.pop(uid, None)
                return
            self._job_key_by_uid[uid] = key
        self.queue.add(key)

    def _on_pod(self, kind: str, pod: Obj, old: Obj | None) -> None:
        ref = controller_reference(pod)
        if ref is None or ref.get("kind") != "Job":
            return
        uid = str(ref.get("uid", ""))
        meta = Meta.of(pod)
        pod_key = f"{meta.namespace}/{meta.name}"
        with self._lock:
            pods = self._pods_by_job.setdefault(uid, {})
            if kind == "DELETED":
                pods.pop(pod_key, None)
                if not pods:
                    self._pods_by_job.pop(uid, None)
            else:
                pods[pod_key] = pod
            self._created.get(uid, {}).pop(pod_key, None)
            job_key = self._job_key_by_uid.get(uid)
        if job_key is not None and (old is None or kind == "DELETED" or _phase(old) != _phase(pod)
                                    or _ready(old) != _ready(pod)):
            self.queue.add(job_key)

    def reconcile(self, key: str) -> None:
        job = self.jobs.get(key)
        if job is None:
            return
        meta = Meta.of(job)
        if meta.deleting:
            return
        uid = meta.uid
        now = time.monotonic()
        with self._lock:
            pods = dict(self._pods_by_job.get(uid, {}))
            unseen = self._created.get(uid, {})
            for pod_key, (at, pod) in list(unseen.items()):
                if now - at > EXPECTATION_SECONDS:
                    del unseen[pod_key]
                else:
                    pods.setdefault(pod_key, pod)
        plan = plan_job(job, list(pods.values()), now_rfc3339(), random_suffix, time.time())
        if plan.requeue_after is not None:
            self.queue.add_after(key, plan.requeue_after + 0.05)
        namespace = meta.namespace or "default"
        for body in plan.create:
            try:
                created = self.client.create(PODS.collection(namespace), body)
            except ApiError as error:
                self.events.emit(job, "Warning", "FailedCreate", f"Error creating pod: {error}")
                raise
            pod_name = Meta.of(body).name
            pod_key = f"{namespace}/{pod_name}"
            with self._lock:
                self._created.setdefault(uid, {})[pod_key] = (time.monotonic(), created)
            self.events.emit(job, "Normal", "SuccessfulCreate",
                             f"Created pod: {pod_name}")
        for name in plan.delete:
            self.client.delete(PODS.item(name, namespace), propagation="Background")
        if plan.status is not None:
            was = finished_condition(job)
            self.client.merge_patch(JOBS.item(meta.name, namespace, "status"),
                                    {"status": plan.status})
            now_finished = finished_condition({"status": plan.status})
            if now_finished and not was:
                reason = "Completed" if now_finished == "Complete" else "BackoffLimitExceeded"
                self.events.emit(job, "Normal" if now_finished == "Complete" else "Warning",
                                 reason, f"Job {now_finished.lower()}")


def _phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase", ""))


def _ready(pod: Obj) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False
