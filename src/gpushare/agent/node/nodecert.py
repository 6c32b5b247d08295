"""The agent's HTTPS identity: a serving certificate signed by the cluster CA.

As a kubelet does with serving-certificate bootstrap, the agent makes a key (`pki/node.key`,
0600, in its data dir), asks for a certificate with a CertificateSigningRequest for the
`kubernetes.io/kubelet-serving` signer (subject `system:node:<node>`, organization
`system:nodes`, its address and host name as names), approves it when its identity may
(otherwise it waits for `kubectl certificate approve`), and keeps the signed certificate in
`pki/node.crt`. A kept certificate is used again while it is the CA's, names the address and
has more than a fifth of its life left.

The cluster CA comes from the agent's kubeconfig (`certificate-authority-data`) or,
without one, from the `kube-root-ca.crt` ConfigMap; it is what the agent checks callers'
client certificates against (`pki/ca.crt`). The serving certificate itself may come from
another CA (the embedded control plane signs nodes with a kubelet-serving CA of their own,
which the platform's clients do not trust): the signer returns that CA after the
certificate, and a kept certificate is checked against it.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import ipaddress
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gpushare.api.serviceaccounts import ROOT_CA_CONFIGMAP
from gpushare.kube.client import CONFIGMAPS, ApiError, KubeClient, Resource

log = logging.getLogger("gpushare.agent")

CSRS = Resource("certificates.k8s.io/v1", "certificatesigningrequests", False)
SIGNER = "kubernetes.io/kubelet-serving"
CA_FILE = "ca.crt"
CERT_FILE = "node.crt"
KEY_FILE = "node.key"


class CertificateUnavailable(RuntimeError):
    """The agent could not get a serving certificate; the message says what is missing."""


@dataclass(frozen=True, slots=True)
class NodeTls:
    """Paths of the agent's CA, serving certificate and key."""

    ca: Path
    cert: Path
    key: Path


def _names(address: str, hostname: str) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys((address, hostname, "localhost", "127.0.0.1")):
        if not host:
            continue
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def cluster_ca(kube: KubeClient) -> bytes:
    """The CA the API server's certificates are signed with (PEM)."""
    path = getattr(kube.api_client.configuration, "ssl_ca_cert", None)
    if path:
        return Path(path).read_bytes()
    body = kube.get(CONFIGMAPS.item(ROOT_CA_CONFIGMAP, "default"))
    pem = ((body or {}).get("data") or {}).get("ca.crt")
    if not pem:
        raise CertificateUnavailable(
            "no cluster CA: the kubeconfig has no certificate-authority-data and the "
            "kube-root-ca.crt ConfigMap is missing")
    return str(pem).encode()


def _still_usable(cert_path: Path, key_path: Path, ca_pem: bytes,
                  wanted: list[x509.GeneralName]) -> bool:
    if not (cert_path.exists() and key_path.exists()):
        return False
    try:
        # the signer hands back the certificate followed by the CA that signed it (the
        # embedded control plane's kubelet-serving CA); a bare certificate is the cluster CA's
        chain = x509.load_pem_x509_certificates(cert_path.read_bytes())
        cert = chain[0]
        issuer = chain[-1] if len(chain) > 1 else x509.load_pem_x509_certificate(ca_pem)
        cert.verify_directly_issued_by(issuer)
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (ValueError, TypeError, x509.ExtensionNotFound, InvalidSignature):
        return False
    if key.public_key() != cert.public_key():  # a renewal cut short between the two files
        return False
    life = cert.not_valid_after_utc - cert.not_valid_before_utc
    left = cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC)
    return left > life / 5 and all(name in sans for name in wanted)


# What a kubelet asks for. An older kube-controller-manager's kubelet-serving signer
# (1.22 was tried) signs exactly these three, key encipherment even for an EC key; newer
# ones also sign the two without it for keys that are not RSA.
SERVING_USAGES = ("digital signature", "key encipherment", "server auth")


def _request_pem(key: ec.EllipticCurvePrivateKey, node: str,
                 names: list[x509.GeneralName]) -> bytes:
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node}")]))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(key, hashes.SHA256())
    )
    return csr.public_bytes(serialization.Encoding.PEM)


def _approve(kube: KubeClient, name: str, body: dict[str, object]) -> None:
    body = dict(body)
    body["status"] = {"conditions": [{
        "type": "Approved", "status": "True", "reason": "AgentSelfApproved",
        "message": "approved by the node agent that asked for it"}]}
    try:
        kube.replace(CSRS.item(name, sub="approval"), body)
    except ApiError as exc:
        if exc.status != 403:
            raise
        log.warning("waiting for an administrator to approve certificate request %s "
                    "(kubectl certificate approve %s)", name, name)


def _wait_signed(kube: KubeClient, name: str, timeout_s: float) -> bytes:
    deadline = time.monotonic() + timeout_s
    while True:
        body = kube.get(CSRS.item(name)) or {}
        status = body.get("status") or {}
        for condition in status.get("conditions") or ():
            if condition.get("type") in ("Denied", "Failed"):
                raise CertificateUnavailable(
                    f"certificate request {name} {condition['type'].lower()}: "
                    f"{condition.get('message', '')}")
        if status.get("certificate"):
            return base64.b64decode(status["certificate"])
        if time.monotonic() > deadline:
            raise CertificateUnavailable(
                f"certificate request {name} was not signed within {timeout_s:.0f} s; "
                f"approve it with: kubectl certificate approve {name}")
        time.sleep(0.2)


def ensure_serving_certificate(kube: KubeClient, node: str, address: str, hostname: str,
                               pki: Path, timeout_s: float = 300.0) -> NodeTls:
    """The agent's CA, certificate and key, asking the API for a certificate if needed."""
    pki.mkdir(parents=True, exist_ok=True, mode=0o700)
    pki.chmod(0o700)
    ca_pem = cluster_ca(kube)
    ca_path, cert_path, key_path = pki / CA_FILE, pki / CERT_FILE, pki / KEY_FILE
    ca_path.write_bytes(ca_pem)
    names = _names(address, hostname)
    if _still_usable(cert_path, key_path, ca_pem, names):
        return NodeTls(ca_path, cert_path, key_path)
    key = ec.generate_private_key(ec.SECP256R1())
    request = _request_pem(key, node, names)
    name = f"node-serving-{node}-{hashlib.sha256(request).hexdigest()[:10]}"[:253]
    body: dict[str, object] = {
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {"request": base64.b64encode(request).decode(), "signerName": SIGNER,
                 "usages": list(SERVING_USAGES)}}
    created = kube.create(CSRS.collection(), body)
    _approve(kube, name, created)
    pem = _wait_signed(kube, name, timeout_s)
    tmp = key_path.with_suffix(".tmp")
    tmp.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
    tmp.chmod(0o600)
    tmp.replace(key_path)
    cert_path.write_bytes(pem)
    cert_path.chmod(0o600)
    log.info("serving certificate for node %s signed (certificate request %s)", node, name)
    return NodeTls(ca_path, cert_path, key_path)
