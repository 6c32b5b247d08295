"""The node: what this host has (inventory), the Node object the agent registers and keeps
alive, and the agent's identity towards the cluster (serving certificate, who may call it).
The agent's bottom room: it imports no other room."""
