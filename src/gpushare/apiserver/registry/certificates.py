"""The `kubernetes.io/kubelet-serving` signer: node agents' serving certificates.

A node agent asks for its HTTPS certificate the way a kubelet does: a
CertificateSigningRequest for this signer, which somebody allowed to update
`certificatesigningrequests/approval` approves (the agent itself when its identity may, or
an administrator with `kubectl certificate approve`). Once a request is approved the API
server signs it at once with the kubelet-serving CA (not the cluster CA every kubeconfig
trusts: `tls.py`) and stores the certificate in `status.certificate`, or adds a `Failed`
condition saying why it will not.

What may be signed (a tenant is cluster-admin of its own logical cluster, so approval
there proves nothing):

* only in the root cluster: a request in a tenant's cluster is never signed (`Failed`,
  reason `SignerNotAvailable`); a tenant that needs a CA brings its own;
* only for the requester's own node: the server records who created the request
  (`spec.username`, `spec.groups`, overwriting what the body said, as kube-apiserver
  does); an approval signs it when the subject `system:node:<name>` is that requester (a
  node identity, group `system:nodes`), or when the approver is a cluster administrator
  (`kubectl certificate approve`). Any other approval signs nothing: the request waits
  for an administrator's.

Requests for any other signer are stored and left alone, as kube-apiserver does without a
controller for them.
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.x509.oid import NameOID

from gpushare.apiserver.auth.access import ROOT_CLUSTER
from gpushare.apiserver.auth.privilege import REQUEST_USER
from gpushare.apiserver.auth.tls import NODE_PREFIX, NODES_GROUP, CsrRefused, sign_node_serving
from gpushare.apiserver.objects import deep_copy, now_rfc3339
from gpushare.apiserver.registry.api import Api
from gpushare.apiserver.resources import ResourceInfo

NODE_SERVING_SIGNER = "kubernetes.io/kubelet-serving"
CSR_GR = "certificates.k8s.io/certificatesigningrequests"
_ALLOWED_USAGES = {"digital signature", "key encipherment", "server auth"}


class _NotHere(CsrRefused):
    """The signer does not exist in this logical cluster."""


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


def _requested_node(request: bytes) -> str:
    try:
        csr = x509.load_pem_x509_csr(request)
    except ValueError as e:
        raise CsrRefused(f"spec.request is not a PEM certificate request: {e}") from None
    cns = csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(cns[0].value) if len(cns) == 1 else ""


def _vouched(spec: dict[str, Any], request: bytes) -> bool:
    """Whether the request is the requester's own node's, or the approval being served
    is a cluster administrator's (who vouches for whatever it approves)."""
    approver = REQUEST_USER.get()
    if approver is not None and approver.is_admin:
        return True
    username = str(spec.get("username") or "")
    groups = [str(g) for g in spec.get("groups") or ()]
    return username.startswith(NODE_PREFIX) and NODES_GROUP in groups and \
        _requested_node(request) == username


class RequesterAdmission:
    """`Api.admission_hooks` entry: a CertificateSigningRequest records who created it
    (`spec.username`, `spec.groups`), whatever the body said; an update keeps it."""

    def __call__(self, api: Any, cluster: str, info: ResourceInfo, obj: dict[str, Any],
                 old: dict[str, Any] | None) -> None:
        if info.group_resource != CSR_GR or not isinstance(obj.get("spec"), dict):
            return
        spec = obj["spec"]
        if old is not None:
            old_spec = old.get("spec") or {}
            for key in ("username", "groups", "uid"):
                if key in old_spec:
                    spec[key] = old_spec[key]
                else:
                    spec.pop(key, None)
            return
        for key in ("username", "groups", "uid"):
            spec.pop(key, None)
        user = REQUEST_USER.get()
        if user is not None:
            spec["username"] = user.name
            spec["groups"] = list(user.groups)


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
            if cluster != ROOT_CLUSTER:
                raise _NotHere("the kubernetes.io/kubelet-serving signer signs only in the "
                               "host cluster, for node agents; bring a CA of your own")
            request = _checked_request(spec)
            if not _vouched(spec, request):
                return obj  # waits for an administrator's approval
            pem = sign_node_serving(self.pki, request)
            new_status["certificate"] = base64.b64encode(pem).decode()
        except CsrRefused as e:
            new_status.setdefault("conditions", []).append({
                "type": "Failed", "status": "True",
                "reason": "SignerNotAvailable" if isinstance(e, _NotHere)
                else "SignerValidationFailure",
                "message": str(e), "lastUpdateTime": now_rfc3339(),
                "lastTransitionTime": now_rfc3339()})
        return api.update(cluster, info, "", obj["metadata"]["name"], updated, "status",
                          manager="gpushare-node-serving-signer")
