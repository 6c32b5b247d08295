"""The GPUs: NVML, MPS daemons, the binding annotations turned into a share (devices, limits,
environment), the enforcement backend chosen by probing, the watchdog's decisions, and the
PyTorch hook put on a fractional pod's path. Above `node` (the inventory) only."""
