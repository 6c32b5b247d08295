"""What the eviction actions share: the victim search (:mod:`.solver`), its candidates,
victim order and steps, the search options and the bookkeeping of failed jobs."""
