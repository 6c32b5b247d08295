"""What the API server's ServiceAccount admission writes on a pod and the node agent (as the
kubelet) reads back: the token's issuer and audience, where it is mounted, the CA's
ConfigMap, and the projected volume that asks for it."""

from __future__ import annotations

from typing import Any

ISSUER = "https://kubernetes.default.svc.cluster.local"
API_AUDIENCE = ISSUER  # like kube-apiserver: --api-audiences defaults to the issuer
TOKEN_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
KUBELET_TOKEN_EXPIRATION = 3607  # what the ServiceAccount admission plugin asks for


def token_volume(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The projected volume of `pod` that carries a ServiceAccount token, if any."""
    for volume in (pod.get("spec") or {}).get("volumes") or ():
        if not isinstance(volume, dict):
            continue
        projected = volume.get("projected")
        if isinstance(projected, dict) and any(
                isinstance(s, dict) and "serviceAccountToken" in s
                for s in projected.get("sources") or ()):
            return volume
    return None
