"""Behaviour switches: one frozen, typed object built once from the config (the way
kube-scheduler's ``feature.Features`` carries its feature gates), so that a rule reads a
named switch instead of testing ``compat == "kai"`` itself.

Each switch says what it changes; ``compat: kai`` turns on those where gpushare's own
default deliberately differs from KAI Scheduler (``docs/scheduling.md``).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpushare.scheduler.config import Config


@dataclass(frozen=True, slots=True)
class Behaviour:
    #: KAI's exact arithmetic and rules wherever gpushare's default differs (the switches
    #: below are the ones already split out of it).
    kai: bool = False
    #: Fair-share division: ``kai`` (whole-unit flooring, leftover pass) or ``exact``.
    fairshare_mode: str = "exact"
    #: A ``gpu-memory`` pod is also checked per node, as its fraction of that node's GPU,
    #: against limits and (non-preemptible) quota: KAI's predicate. gpushare's default
    #: checks it once, as the fraction of the largest GPU.
    per_node_quota_check: bool = False

    @classmethod
    def of(cls, config: Config) -> Behaviour:
        kai = config.kai
        return cls(kai=kai, fairshare_mode=config.fairshare_mode, per_node_quota_check=kai)
