"""The `kubernetes.io/kubelet-serving` signer: node agents' serving certificates.

A node agent asks for its HTTPS certificate the way a kubelet does: a
CertificateSigningRequest for this signer, which somebody allowed to update
`certificatesigningrequests/approval` approves (the agent itself when its identity may, or
an administrator with `kubectl certificate approve`). Once a request is approved the API
server, which holds the cluster CA, signs it at once and stores the certificate in
`status.certificate`, or adds a `Failed` condition saying why it will not.

Requests for any other signer are stored and left alone, as kube-apiserver does without a
controller for them.
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path
from typing import Any

from gpushare.apiserver.auth.tls import CsrRefused, sign_node_serving
from gpushare.apiserver.objects import deep_copy, now_rfc3339
from gpushare.apiserver.registry.api import Api
from gpushare.apiserver.resources import ResourceInfo

NODE_SERVING_SIGNER = "kubernetes.io/kubelet-serving"
_ALLOWED_USAGES = {"digital signature", "key encipherment", "server auth"}


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for condition in status.get("conditions") or ():
        if isinstance(condition, dict) and condition.get("type") == kind:
            return condition
    return None


def _checked_request(spec: dict[str, Any]) -> bytes:
    usages = spec.get("usages") or []
    if "server auth" not in usages or not set(usages) <= _ALLOWED_USAGES:
        raise CsrRefused("spec.usages must include \"server auth\" and only "
                         f"{sorted(_ALLOWED_USAGES)}")
    try:
        return base64.b64decode(str(spec.get("request") or ""), validate=True)
    except (binascii.Error, ValueError):
        raise CsrRefused("spec.request is not base64") from None


class NodeServingSigner:
    def __init__(self, pki: Path) -> None:
        self.pki = pki

    def after_approval(self, api: Api, cluster: str, info: ResourceInfo,
                       obj: dict[str, Any]) -> dict[str, Any]:
        """Sign `obj` if it is an approved, unsigned request for this signer; the object as
        stored afterwards."""
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        approved = _condition(status, "Approved")
        if spec.get("signerName") != NODE_SERVING_SIGNER or status.get("certificate") or \
                approved is None or approved.get("status") != "True" or \
                _condition(status, "Denied") is not None or \
                _condition(status, "Failed") is not None:
            return obj
        updated = deep_copy(obj)
        new_status = updated.setdefault("status", {})
        try:
            pem = sign_node_serving(self.pki, _checked_request(spec))
            new_status["certificate"] = base64.b64encode(pem).decode()
        except CsrRefused as e:
            new_status.setdefault("conditions", []).append({
                "type": "Failed", "status": "True", "reason": "SignerValidationFailure",
                "message": str(e), "lastUpdateTime": now_rfc3339(),
                "lastTransitionTime": now_rfc3339()})
        return api.update(cluster, info, "", obj["metadata"]["name"], updated, "status",
                          manager="gpushare-node-serving-signer")
