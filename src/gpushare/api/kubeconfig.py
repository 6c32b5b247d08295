"""A kubeconfig of one server, one bearer token and one context: what the API server writes
for its admin and its components, and what a tenant gets for its virtual cluster."""

from __future__ import annotations

import base64
from typing import Any


def kubeconfig(server: str, token: str, user: str = "admin", context: str = "gpushare",
               ca_pem: bytes | None = None) -> dict[str, Any]:
    """The kubeconfig (as a dict) for ``token`` at ``server``, trusting ``ca_pem``."""
    cluster: dict[str, Any] = {"server": server}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": cluster}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": user}}],
        "current-context": context,
        "preferences": {},
    }
