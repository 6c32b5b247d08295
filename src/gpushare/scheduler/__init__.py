"""gpushare's scheduler core: one deterministic scheduling cycle on a cluster state.

Pure: no I/O, no clock (the caller passes ``now``). See README.md in this package for the
internal API the actions share.
"""

from gpushare.scheduler.config import Config
from gpushare.scheduler.cycle import run_cycle
from gpushare.scheduler.decisions import Bind, CycleResult, Evict, Pipeline, QueueReport
from gpushare.scheduler.session import Session
from gpushare.scheduler.state import ClusterState, Statement

__all__ = [
    "Bind",
    "ClusterState",
    "Config",
    "CycleResult",
    "Evict",
    "Pipeline",
    "QueueReport",
    "Session",
    "Statement",
    "run_cycle",
]
