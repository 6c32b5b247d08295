"""Scheduling: the scheduler loop (watched changes in, cycles of the pure core, bindings and
evictions out), its mirror of the API, the translation of API objects to the core's model,
taints, the pod-grouper that gives every pod its PodGroup, and Queue status."""
