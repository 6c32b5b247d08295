"""Nodes: the node-lifecycle controller (a node whose agent stops heartbeating turns Unknown),
agentless nodes' heartbeats, static nodes (declared GPUs, no agent) and their pods."""
