"""The eviction actions of a scheduling cycle: consolidation, reclaim, preempt and
stale-gang eviction, on one shared victim search (:mod:`.solver`).

Importing the package registers the four actions with the cycle driver.
"""

from gpushare.scheduler.actions import register_action
from gpushare.scheduler.victims.consolidation import consolidation
from gpushare.scheduler.victims.preempt import preempt
from gpushare.scheduler.victims.reclaim import reclaim
from gpushare.scheduler.victims.stale_gang import evict_stale_gangs

register_action("consolidation", consolidation)
register_action("reclaim", reclaim)
register_action("preempt", preempt)
register_action("stalegangeviction", evict_stale_gangs)

__all__ = ["consolidation", "evict_stale_gangs", "preempt", "reclaim"]
