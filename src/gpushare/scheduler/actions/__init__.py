"""The scheduling actions, as KAI names them: ``allocate``, ``consolidation``, ``reclaim``,
``preempt`` and ``stalegangeviction``, one module each, on the shared victim search in
:mod:`.common`. The cycle looks them up in the explicit registry (:mod:`.registry`)."""
