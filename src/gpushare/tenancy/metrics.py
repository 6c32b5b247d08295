"""Per-tenant numbers of the tenancy controller, as Prometheus metrics (default registry).

Plain gauges and counters other components can read or export: live pods and GPUs held
per tenant, and how long a change takes to cross the boundary each way.
"""

from __future__ import annotations

import contextlib

from prometheus_client import Counter, Gauge, Histogram

TENANT_PODS = Gauge("gpushare_tenant_pods", "Live (not finished) pods of a virtual cluster",
                    ["tenant"])
TENANT_GPU_ALLOCATED = Gauge("gpushare_tenant_gpu_allocated",
                             "GPUs held on the host by a virtual cluster's pods", ["tenant"])
TENANT_PHASE = Gauge("gpushare_tenant_phase", "1 for the phase a virtual cluster is in",
                     ["tenant", "phase"])
SYNC_SECONDS = Histogram(
    "gpushare_tenant_sync_seconds",
    "Seconds from a change on one side to its copy on the other: direction=to_host (tenant "
    "pod created -> host pod created), to_tenant (host pod bound -> tenant pod bound)",
    ["tenant", "direction"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5, 5.0, 10.0),
)
SYNC_ACTIONS = Counter("gpushare_tenant_sync_actions_total",
                       "Writes the syncer made, by kind of object and action",
                       ["tenant", "kind", "action"])
SYNC_ERRORS = Counter("gpushare_tenant_sync_errors_total", "Failed syncer reconciles",
                      ["tenant"])


def forget(tenant: str) -> None:
    """Drop a deleted tenant's series."""
    for gauge in (TENANT_PODS, TENANT_GPU_ALLOCATED):
        with contextlib.suppress(KeyError):
            gauge.remove(tenant)
    for phase in ("Pending", "Ready", "Paused", "Deleting", "Failed"):
        with contextlib.suppress(KeyError):
            TENANT_PHASE.remove(tenant, phase)
