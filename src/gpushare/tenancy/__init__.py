"""Virtual clusters: each team a Kubernetes cluster of its own on the shared GPUs.

A tenant is a logical cluster of the API server (``/clusters/<name>``) described on the
host by a ``VirtualCluster`` (``tenancy.gpushare.io/v1alpha1``). The tenancy controller
provisions it (host namespace, the tenant's cluster-admin, node and queue views), and its
syncer copies the tenant's pods into the host namespace under the platform's rules and
their state back. The API server enforces the tenant's policy at admission.
"""
