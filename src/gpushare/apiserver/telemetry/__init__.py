"""What the server measures and is told: its own metrics, components' pushes, metrics.k8s.io."""
