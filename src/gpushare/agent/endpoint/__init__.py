"""The node endpoint, kubelet style: HTTPS server, WebSocket and SPDY/3.1 framings, exec,
attach, logs and port-forward. The top room below the agent process itself."""
