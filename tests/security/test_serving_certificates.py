"""Attack: a certificate the platform's clients trust, in a tenant's (or a node's) hands.

The host admin's kubeconfig, and every gpushare kubeconfig, trusts the cluster CA. If that
CA signs a certificate for somebody who is not the API server, their TLS server receives
the platform's tokens. A tenant admin is cluster-admin of its own cluster: it can create a
`kubernetes.io/kubelet-serving` request there and approve it itself; a node agent gets a
serving certificate for 127.0.0.1. Neither may chain to the CA the platform's clients pin.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import subprocess
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from tenancy_support import KUBECTL, Kubectl, Platform
from tls_listener import Listener

from waiting import wait_for

SIGNER = "kubernetes.io/kubelet-serving"


def _csr(name: str, node: str, key: ec.EllipticCurvePrivateKey) -> str:
    request = (x509.CertificateSigningRequestBuilder()
               .subject_name(x509.Name([
                   x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
                   x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node}")]))
               .add_extension(x509.SubjectAlternativeName([
                   x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
               .sign(key, hashes.SHA256()))
    return json.dumps({
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {"request": base64.b64encode(request.public_bytes(
            serialization.Encoding.PEM)).decode(), "signerName": SIGNER,
            "usages": ["digital signature", "key encipherment", "server auth"]}})


def _settled(kubectl: Kubectl, name: str) -> dict:
    def done() -> dict | None:
        status = kubectl.json("get", "csr", name).get("status") or {}
        kinds = {c["type"] for c in status.get("conditions") or ()}
        return status if status.get("certificate") or "Failed" in kinds else None
    return wait_for(done, 30, f"certificate request {name} signed or failed")


def _admin_token(platform: Platform) -> str:
    import yaml
    cfg = yaml.safe_load((platform.data / "admin.kubeconfig").read_text())
    return str(cfg["users"][0]["user"]["token"])


def _impostor_gets_token(platform: Platform, cert: Path, key: Path) -> bool:
    """Serve TLS with `cert` and point the host admin's kubectl at it: whether the admin's
    token reached the impostor."""
    listener = Listener(cert, key)
    try:
        subprocess.run([KUBECTL, "--kubeconfig", str(platform.data / "admin.kubeconfig"),
                        "--server", f"https://127.0.0.1:{listener.port}", "get", "nodes"],
                       capture_output=True, text=True, timeout=60)
    finally:
        listener.close()
    token = _admin_token(platform).encode()
    return any(token in data for data in listener.received)


def test_a_tenant_cannot_get_a_serving_certificate_signed_by_the_host(
        platform: Platform, tmp_path: Path) -> None:
    tenant = platform.tenant("evil", "--queue", "nlp")
    key = ec.generate_private_key(ec.SECP256R1())
    tenant.run("apply", "-f", "-", stdin=_csr("evil-serving", "evil", key))
    tenant.run("certificate", "approve", "evil-serving")   # cluster-admin of its own cluster
    status = _settled(tenant, "evil-serving")
    failed = [c for c in status.get("conditions") or () if c["type"] == "Failed"]
    if status.get("certificate"):
        # what the attack does with it: a TLS server the host admin's kubectl talks to
        cert = tmp_path / "evil.crt"
        cert.write_bytes(base64.b64decode(status["certificate"]))
        keyfile = tmp_path / "evil.key"
        keyfile.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                              serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()))
        assert not _impostor_gets_token(platform, cert, keyfile), \
            "a tenant's self-approved certificate received the host admin's token"
    assert not status.get("certificate"), "the host's signer signed a tenant's request"
    assert failed and failed[0]["reason"] == "SignerNotAvailable", status


def test_a_node_serving_certificate_is_not_trusted_as_the_api_server(
        platform: Platform) -> None:
    """The agent's own signed certificate names 127.0.0.1; a process holding it (a node
    taken over) must still not pass for the API server to the platform's clients."""
    pki = platform.data / "agent" / "pki"
    assert (pki / "node.crt").exists() and (pki / "node.key").exists()
    assert not _impostor_gets_token(platform, pki / "node.crt", pki / "node.key"), \
        "the host admin's kubectl sent its token to a server holding a node's certificate"


CSR_MAKER = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: csr-maker}
rules:
- apiGroups: [certificates.k8s.io]
  resources: [certificatesigningrequests]
  verbs: [create, get, list, watch]
- apiGroups: [certificates.k8s.io]
  resources: [certificatesigningrequests/approval]
  verbs: [update]
- apiGroups: [certificates.k8s.io]
  resources: [signers]
  resourceNames: [kubernetes.io/kubelet-serving]
  verbs: [approve]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: csr-maker}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: csr-maker}
subjects: [{kind: User, name: csr-maker, apiGroup: rbac.authorization.k8s.io}]
"""


def test_only_a_node_itself_gets_its_serving_certificate(
        platform: Platform, tmp_path: Path) -> None:
    """A root-cluster user who may create and approve requests (but is not the node) asks
    for the node's certificate and approves it: nothing is signed until a cluster
    administrator approves. The requester recorded is the server's, not the body's."""
    platform.host.apply(CSR_MAKER)
    kubeconfig = tmp_path / "maker.kubeconfig"
    platform.gpushare("kubeconfig", "--data-dir", str(platform.data), "--user", "csr-maker",
                      "-o", str(kubeconfig))
    maker = Kubectl(kubeconfig)
    body = json.loads(_csr("steal-box", "box", ec.generate_private_key(ec.SECP256R1())))
    body["spec"]["username"] = "system:node:box"          # a lie the server overwrites
    body["spec"]["groups"] = ["system:nodes"]
    maker.run("apply", "-f", "-", stdin=json.dumps(body))
    stored = maker.json("get", "csr", "steal-box")["spec"]
    assert stored["username"] == "csr-maker" and "system:nodes" not in stored["groups"], stored
    maker.run("certificate", "approve", "steal-box")   # signing happens in this request
    status = maker.json("get", "csr", "steal-box")["status"]
    assert [c["type"] for c in status["conditions"]] == ["Approved"], status
    assert not status.get("certificate"), "a non-node's self-approved request was signed"
    platform.host.run("certificate", "approve", "--force", "steal-box")
    assert platform.host.json("get", "csr", "steal-box")["status"].get("certificate")
