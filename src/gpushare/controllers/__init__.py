"""The controllers, kube-controller-manager style, in three rooms that do not import each
other: `scheduling` (the scheduler loop, its mirror of the API, the pod-grouper, queue
status), `workloads` (Jobs, ReplicaSets, Deployments, Endpoints, disruption budgets, pod GC)
and `nodes` (node lifecycle, agentless and static nodes). Shared below them: `events` and
the `Controller` protocol. The process that runs them, with the one registry of their names,
is `gpushare.controller_manager`."""
