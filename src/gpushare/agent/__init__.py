"""The node agent: runs the pods bound to this node as local processes and enforces GPU shares.

It talks to the control plane only through the Kubernetes API. The pure parts (GPU share →
environment and limits, `$(VAR)` expansion, status building, watchdog decisions) live in
modules of their own so they can be tested without processes, GPUs or a server.

Rooms, each importing only those below it: `agent` (the process) > `endpoint` (the HTTPS
node endpoint) > `runtime` (sandbox, processes, supervision) > `pods` (spec, status,
admission ledger, status writer) > `gpu` (NVML, MPS, shares, watchdog) > `node`.
"""
