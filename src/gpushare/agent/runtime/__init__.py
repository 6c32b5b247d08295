"""The runtime: a pod's sandbox, its process groups, their supervision (init containers,
restarts, deletion), logs, the service-account token projected into the sandbox, the
planner that combines spec, GPU share and environment, and the per-pod measurements (GPU
watchdog pass, telemetry). Above `pods`, `gpu` and `node`."""
