"""KAI's ``proportion`` rules: the fair-share division (:mod:`.resource_division`), the
queue share figures (:mod:`.resource_share`), the reclaim strategies (:mod:`.reclaimable`)
and gpushare's steady-state reclaim bound (:mod:`.steady`)."""
