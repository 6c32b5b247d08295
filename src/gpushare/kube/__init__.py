"""The one layer over the official Kubernetes client that the controllers and the agent share:
a JSON client (`client`), list+watch caches (`informer`, `informers`), node Leases (`lease`)
and quantity strings (`quantity`)."""
