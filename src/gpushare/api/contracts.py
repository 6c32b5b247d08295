"""The names users and gpushare's parts share (``docs/contracts.md``): what users write on
their objects (KAI Scheduler's labels and annotations, the GPU resource), what the parts
write for each other, and the codec of the GPU binding the scheduler loop writes on a pod
and translate and the agent read. Every such name is spelled here and only here.

Pure: no I/O. The binding's portion travels in exact milli-GPUs: the scheduler decides
milli-GPUs, the annotation writes them as a decimal with at most three places ("0.33",
"0.005", "1"), and reading gives the same milli-GPUs back.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

MILLI = 1000

# What users write (KAI Scheduler's names): the queue and gang of a pod or workload.
QUEUE_LABEL = "kai.scheduler/queue"
DEFAULT_QUEUE = "default-queue"
PRIORITY_LABEL = "priorityClassName"
PREEMPTIBILITY_LABEL = "kai.scheduler/preemptibility"
MIN_MEMBER_ANNOTATION = "kai.scheduler/batch-min-member"
SKIP_PODGROUPER_LABEL = "kai.scheduler/skip-podgrouper"
PODGROUP_ANNOTATION = "pod-group-name"
PODGROUP_API_VERSION = "scheduling.run.ai/v2alpha2"
# The scheduler names whose pods gpushare schedules (``spec.schedulerName``).
SCHEDULER_NAMES = ("gpushare", "kai-scheduler")
# GPUs: the extended resource, a pod's fraction or memory request, node labels.
GPU_RESOURCE = "nvidia.com/gpu"
GPU_FRACTION_ANNOTATION = "gpu-fraction"
GPU_MEMORY_ANNOTATION = "gpu-memory"
GPU_DEVICES_ANNOTATION = "gpu-fraction-num-devices"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
# The well-known node label every Node carries.
HOSTNAME_LABEL = "kubernetes.io/hostname"

# Written by the scheduler loop on a pod when it binds it.
GPU_INDICES_ANNOTATION = "gpushare.io/gpu-indices"
GPU_PORTION_ANNOTATION = "gpushare.io/gpu-portion"
GPU_MEMORY_MIB_ANNOTATION = "gpushare.io/gpu-memory-mib"
# Written by the agent (or `gpushare node add`) on its Node.
NODE_GPUS_ANNOTATION = "gpushare.io/gpus"
NODE_GPUS_DECLARED_ANNOTATION = "gpushare.io/gpus-declared"
NODE_ENFORCEMENT_ANNOTATION = "gpushare.io/enforcement"
STATIC_NODE_ANNOTATION = "gpushare.io/static-node"
# The taint of a node without an agent (`gpushare node add`): only pods that tolerate it land.
NO_AGENT_TAINT = "gpushare.io/no-agent"
# Written by the agent on its Node and on the pods it runs.
GPU_USAGE_ANNOTATION = "gpushare.io/gpu-usage"
# On a PodGroup: the longest its pods run (a duration, e.g. 20m), given by its owner; such
# a job may start on nodes reserved for a waiting gang if it ends before they are due.
EXPECTED_RUNTIME_ANNOTATION = "gpushare.io/expected-runtime"
# On a PodGroup, written by the max-runtime controller when the job ran past its maximum
# runtime: JSON {policy, at, runningSince, notBefore}; the scheduler holds the job back
# until notBefore (policy requeue) or for good (policy fail).
MAX_RUNTIME_EXCEEDED_ANNOTATION = "gpushare.io/max-runtime-exceeded"
# On a PodGroup, written by the scheduler: the nodes reserved for it (JSON: nodes, since),
# read back after a restart.
RESERVATION_ANNOTATION = "gpushare.io/reservation"
# The common name of the API server's client certificate: what a node agent lets in (with a
# token TokenReview and SubjectAccessReview allow `nodes/proxy` for).
NODE_CLIENT_NAME = "gpushare:apiserver-node-client"
# The `kubernetes` Service's ClusterIP (the first of the Service range): pods reach the API
# server there (a node agent DNATs it), so the API's serving certificate names it, with the
# Service's DNS names.
API_SERVICE_IP = "10.96.0.1"
API_SERVICE_NAMES = ("kubernetes", "kubernetes.default", "kubernetes.default.svc",
                     "kubernetes.default.svc.cluster.local")


def node_hop_subprotocol(name: str) -> str:
    """The WebSocket subprotocol the API server asks a node agent for when a client asked
    for `name`: the same, with any "/" (not allowed in a subprotocol token, yet in
    kubectl's "SPDY/3.1+portforward.k8s.io") written "-"."""
    return name.replace("/", "-")


class BindingError(ValueError):
    """A GPU binding annotation that cannot be read; the message names the annotation."""


@dataclass(frozen=True, slots=True)
class GpuBinding:
    """Where a bound pod's GPUs are: physical indices, milli-GPU of each, MiB of each."""

    indices: tuple[int, ...]
    portion_milli: int  # of each listed GPU; 1000 for whole GPUs
    memory_mib: int = 0  # per listed GPU; 0: not written

    def annotations(self) -> dict[str, str]:
        out = {
            GPU_INDICES_ANNOTATION: ",".join(str(i) for i in self.indices),
            GPU_PORTION_ANNOTATION: format_portion_milli(self.portion_milli),
        }
        if self.memory_mib:
            out[GPU_MEMORY_MIB_ANNOTATION] = str(self.memory_mib)
        return out


def format_portion_milli(milli: int) -> str:
    """330 → ``"0.33"``, 5 → ``"0.005"``, 1000 → ``"1"``, 0 → ``"0"``."""
    if milli < 0:
        raise ValueError(f"a GPU portion cannot be negative: {milli}")
    whole, rest = divmod(milli, MILLI)
    if not rest:
        return str(whole)
    return f"{whole}.{rest:03d}".rstrip("0")


def parse_portion_milli(text: str) -> int:
    """The milli-GPUs a portion annotation says: ``"0.33"`` → 330; more than three decimal
    places, a negative value or anything but a decimal number is a ``BindingError``."""
    try:
        value = Decimal(text.strip())
    except InvalidOperation:
        raise BindingError(
            f"metadata.annotations[{GPU_PORTION_ANNOTATION}]: {text!r} is not a number"
        ) from None
    milli = value * MILLI
    if not value.is_finite() or value < 0 or milli != milli.to_integral_value():
        raise BindingError(
            f"metadata.annotations[{GPU_PORTION_ANNOTATION}]: {text!r} is not a portion in "
            "milli-GPUs (at most three decimal places, not negative)"
        )
    return int(milli)


def parse_indices(text: str) -> tuple[int, ...]:
    """``"2,3"`` → (2, 3); ``""`` → ()."""
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise BindingError(
            f"metadata.annotations[{GPU_INDICES_ANNOTATION}]: {text!r} is not a list of GPU "
            "indices"
        ) from None
