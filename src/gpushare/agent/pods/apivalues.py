"""The values a pod's spec refers to (configMapKeyRef, secretKeyRef, configMap and secret
volumes), read from the API: the `ValueSource` the agent gives its pods."""

from __future__ import annotations

from collections.abc import Mapping

from gpushare.agent.pods.podspec import decode_secret
from gpushare.kube.client import CONFIGMAPS, SECRETS, KubeClient


class ApiValues:
    def __init__(self, kube: KubeClient) -> None:
        self._kube = kube

    def config_map(self, namespace: str, name: str) -> Mapping[str, str] | None:
        body = self._kube.get(CONFIGMAPS.item(name, namespace))
        return None if body is None else dict(body.get("data") or {})

    def secret(self, namespace: str, name: str) -> Mapping[str, str] | None:
        body = self._kube.get(SECRETS.item(name, namespace))
        if body is None:
            return None
        values = decode_secret(body.get("data") or {}) or {}
        # a real API server folds stringData into data on write; accept it unfolded too
        values.update({k: str(v) for k, v in (body.get("stringData") or {}).items()})
        return values
