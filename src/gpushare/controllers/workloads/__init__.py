"""Workloads, as kube-controller-manager keeps them: Jobs, ReplicaSets, ReplicationControllers,
Deployments, Endpoints and EndpointSlices, PodDisruptionBudget status and pod GC. The pure
rules (`jobs`, `replicas`) beside the controllers that apply them."""
