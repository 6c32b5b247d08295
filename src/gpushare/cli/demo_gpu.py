"""The pure parts of the demo's GPU steps: the Node's enforcement, the teams' GPU manifests,
their rate lines and the judgement of the measured shares. No I/O here."""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping
from typing import Any

import yaml

from gpushare.api.contracts import NODE_ENFORCEMENT_ANNOTATION, NODE_GPUS_DECLARED_ANNOTATION
from gpushare.api.objects import Meta

ENFORCEMENT = NODE_ENFORCEMENT_ANNOTATION
DECLARED = NODE_GPUS_DECLARED_ANNOTATION
RATE_LINE = re.compile(r"^rate (\d+(?:\.\d+)?) TFLOP/s$", re.MULTILINE)


def real_enforcement(node: Mapping[str, Any]) -> str | None:
    """The enforcement in force on a Node with real GPUs, or None (declared GPUs / none)."""
    annotations = Meta.of(node).annotations
    value = annotations.get(ENFORCEMENT)
    if DECLARED in annotations or not value or value.startswith("none"):
        return None
    return str(value)


def gpu_manifest(text: str, python: str, worker: str, team: str,
                 extra: tuple[str, ...] = ()) -> str:
    """The manifest with each container running the matmul worker instead of its sleep."""
    docs = [d for d in yaml.safe_load_all(text) if d]
    for doc in docs:
        spec = doc["spec"]["template"]["spec"] if doc.get("kind") == "Job" else doc["spec"]
        for container in spec["containers"]:
            container["command"] = [python, worker, team, *extra]
            container.pop("args", None)
    return yaml.safe_dump_all(docs, sort_keys=False)


def parse_rates(log: str) -> list[float]:
    """The TFLOP/s of each ``rate <x> TFLOP/s`` line of a worker's log, in order."""
    return [float(m) for m in RATE_LINE.findall(log)]


def recent_rate(log: str, last: int = 3) -> float | None:
    """The median of the last ``last`` rates (None before the worker reported ``last``)."""
    rates = parse_rates(log)
    return statistics.median(rates[-last:]) if len(rates) >= last else None


def shares(rates: Mapping[str, float]) -> dict[str, float]:
    """Each team's part of the summed rate."""
    total = sum(rates.values())
    return {team: (rate / total if total > 0 else 0.0) for team, rate in rates.items()}


def judge_shares(rates: Mapping[str, float], quotas: Mapping[str, float],
                 tolerance: float = 0.1) -> list[str]:
    """Problems (empty when fine): a team whose measured share of the summed rate is more
    than ``tolerance`` away from its quota's share of the summed quotas."""
    if set(rates) != set(quotas):
        return [f"rates for {sorted(rates)} but quotas for {sorted(quotas)}"]
    measured = shares(rates)
    total_quota = sum(quotas.values())
    problems = []
    for team in sorted(rates):
        expected = quotas[team] / total_quota
        if abs(measured[team] - expected) > tolerance:
            problems.append(f"{team}: measured share {measured[team]:.2f}, expected "
                            f"{expected:.2f} ± {tolerance:.2f}")
    return problems


def kept_rate(before: float, after: float, floor: float = 0.7) -> bool:
    """Whether a team kept its rate: ``after`` is at least ``floor`` of ``before``."""
    return before > 0 and after >= floor * before


def stopped_by_enforcement(pod: Mapping[str, Any], log: str) -> str | None:
    """How the enforcement stopped an over-share pod (None if it did not): the watchdog's
    ``GPUMemoryExceeded`` or a failed allocation (MPS's memory limit)."""
    status = pod.get("status") or {}
    if status.get("phase") != "Failed":
        return None
    states = [c.get("state", {}).get("terminated") or {}
              for c in status.get("containerStatuses") or []]
    reasons = {status.get("reason"), *(s.get("reason") for s in states)}
    if "GPUMemoryExceeded" in reasons:
        message = status.get("message") or next((s.get("message") for s in states), "")
        return f"killed by the NVML watchdog (GPUMemoryExceeded): {message}".rstrip(": ")
    if "allocation of" in log and "failed" in log:
        line = next(x for x in log.splitlines() if x.startswith("allocation of"))
        return f"its allocation failed under the MPS memory limit: {line}"
    return None
