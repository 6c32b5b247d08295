"""The pods' network on a node: a network namespace, an address and a veth on the node's
bridge for each pod (`links`, `addressing`); the node's nftables tables that keep tenants
apart, keep pods off the host's ports and make Services and hostPorts work (`firewall`,
`services`); the cluster DNS served on the bridge (`dns`); `podnet.PodNetwork` ties them
to the agent."""
