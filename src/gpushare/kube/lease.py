"""Node heartbeat Leases in `kube-node-lease`: the agent renews its own, the node-lifecycle
controller reads them."""

from __future__ import annotations

from typing import Any

from gpushare.kube.client import LEASES, NAMESPACES, ApiError, KubeClient

NODE_LEASE_NAMESPACE = "kube-node-lease"


def renew_node_lease(
    client: KubeClient, name: str, holder: str, duration_s: int, now_micro: str
) -> bool:
    """Create or renew `kube-node-lease/<name>`; False when the API has no leases."""
    try:
        client.merge_patch(
            LEASES.item(name, NODE_LEASE_NAMESPACE),
            {"spec": {"holderIdentity": holder, "renewTime": now_micro}},
        )
        return True
    except ApiError as error:
        if not error.not_found:
            return False
    body = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": NODE_LEASE_NAMESPACE},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration_s,
            "renewTime": now_micro,
        },
    }
    collection = LEASES.collection(NODE_LEASE_NAMESPACE)
    try:
        client.create(collection, body)
        return True
    except ApiError as error:
        if not error.not_found:
            return False
    try:  # the namespace may be missing: make it once
        client.create(NAMESPACES.collection(), {"metadata": {"name": NODE_LEASE_NAMESPACE}})
        client.create(collection, body)
        return True
    except ApiError:
        return False


def node_lease(client: KubeClient, name: str) -> dict[str, Any] | None:
    """The node's Lease, or None when it is missing or cannot be read."""
    try:
        return client.get(LEASES.item(name, NODE_LEASE_NAMESPACE))
    except ApiError:
        return None
