"""A pod's own ServiceAccount token, as the kubelet projects it.

When the API server's admission gave the pod a projected `kube-api-access-*` volume, the
agent asks for a TokenRequest for the pod's ServiceAccount, bound to the pod (so it stops
working when the pod is deleted), for the volume's audience and lifetime, and writes it
with the cluster CA and the namespace into the pod's sandbox (`sandbox.write_service_account`).
Like the kubelet it asks again once 80% of the lifetime has passed. A pod never sees the
agent's own credentials.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from gpushare.agent.runtime import sandbox as sb
from gpushare.api.objects import Meta
from gpushare.api.serviceaccounts import (
    API_AUDIENCE,
    KUBELET_TOKEN_EXPIRATION,
    ROOT_CA_CONFIGMAP,
    token_volume,
)
from gpushare.kube.client import CONFIGMAPS, ApiError, KubeClient, Resource

log = logging.getLogger("gpushare.agent")

SERVICE_ACCOUNTS = Resource("v1", "serviceaccounts", True)
REFRESH_AT = 0.8  # of the token's lifetime, as the kubelet

EventSink = Callable[[dict[str, Any], str, str], None]  # (pod, reason, message)


def _token_source(pod: dict[str, Any]) -> dict[str, Any] | None:
    volume = token_volume(pod)
    if volume is None:
        return None
    for source in volume["projected"].get("sources") or ():
        if isinstance(source, dict) and isinstance(source.get("serviceAccountToken"), dict):
            return dict(source["serviceAccountToken"])
    return None


class ServiceAccountTokens:
    def __init__(self, kube: KubeClient, event: EventSink) -> None:
        self._kube = kube
        self._event = event

    def wanted(self, pod: dict[str, Any]) -> bool:
        """Whether the pod has a projected token (absent with automountServiceAccountToken
        false, or when the pod mounts its own at the standard path)."""
        return _token_source(pod) is not None

    def request(self, pod: Mapping[str, Any], audience: str, seconds: int) -> str:
        """A token of the pod's ServiceAccount bound to the pod, for `audience` (the API
        server's when empty) and `seconds` (TokenRequest)."""
        meta = Meta.of(pod)
        namespace = meta.namespace or "default"
        account = str((pod.get("spec") or {}).get("serviceAccountName") or "default")
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": [audience or API_AUDIENCE],
                "expirationSeconds": seconds,
                "boundObjectRef": {"kind": "Pod", "apiVersion": "v1",
                                   "name": meta.name, "uid": meta.uid},
            },
        }
        answer = self._kube.create(SERVICE_ACCOUNTS.item(account, namespace, "token"), body)
        token = str((answer.get("status") or {}).get("token") or "")
        if not token:
            raise ApiError(500, "the TokenRequest answer carries no token")
        return token

    def write(self, pod: dict[str, Any], state: sb.SandboxState) -> bool:
        """Request the token and write the files; False (with a Warning Event) on failure."""
        source = _token_source(pod) or {}
        meta = Meta.of(pod)
        namespace = meta.namespace or "default"
        account = str((pod.get("spec") or {}).get("serviceAccountName") or "default")
        try:
            token = self.request(pod, str(source.get("audience") or ""),
                                 int(source.get("expirationSeconds")
                                     or KUBELET_TOKEN_EXPIRATION))
            ca = self._root_ca(namespace)
        except Exception as exc:
            message = (f'MountVolume.SetUp failed for the ServiceAccount token of "{account}": '
                       f"{exc}")
            log.warning("pod %s/%s: %s", namespace, meta.name, message)
            self._event(pod, "FailedMount", message)
            return False
        sb.write_service_account(state, token, ca, namespace)
        return True

    def refresh(self, pod: dict[str, Any], state: sb.SandboxState) -> bool:
        """Write a fresh token once 80% of the current one's lifetime has passed."""
        source = _token_source(pod) or {}
        lifetime = int(source.get("expirationSeconds") or KUBELET_TOKEN_EXPIRATION)
        try:
            written = os.stat(state.meta / sb.SA_DIR / "token").st_mtime
        except OSError:
            return False
        if time.time() - written < REFRESH_AT * lifetime:
            return False
        return self.write(pod, state)

    def _root_ca(self, namespace: str) -> str:
        config_map = self._kube.get(CONFIGMAPS.item(ROOT_CA_CONFIGMAP, namespace)) or {}
        return str((config_map.get("data") or {}).get("ca.crt") or "")
