"""The pods as the API sees them: reading a pod spec into container plans, `$(VAR)`
expansion, the status the kubelet reports, the agent's admission ledger of GPU slots and the
one writer of status, deletions and events. Above `gpu` and `node`; runs nothing."""
