"""The cluster CA and what it signs, kept in `D/pki/`.

kubectl only sends bearer tokens over TLS, so the API is served over HTTPS; the admin
kubeconfig carries the CA so clients verify the server. The CA is made once and kept, so
kubeconfigs stay valid; the server certificate is re-issued when it does not name the
address the server listens on.

Two CAs, so that nothing a node or a tenant can get signed is trusted by the platform's
clients:

* the **cluster CA** (`ca.crt`) signs only what the control plane itself holds: the API
  server's serving certificate (every kubeconfig trusts this CA) and its client certificate
  for node agents (`node-client.crt`, what it shows an agent when it proxies logs, exec,
  attach and port-forward; the agents check callers against this CA);
* the **kubelet-serving CA** (`node-ca.crt`) signs node agents' serving certificates, asked
  for with a CertificateSigningRequest for the `kubernetes.io/kubelet-serving` signer
  (`sign_node_serving`). Only the API server's connections to node agents trust it (as
  kube-apiserver's `--kubelet-certificate-authority`): a certificate of this CA, whatever
  names it carries, is never accepted as the API server.
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gpushare.api.contracts import API_SERVICE_IP, API_SERVICE_NAMES, NODE_CLIENT_NAME

CA_CERT = "ca.crt"
CA_KEY = "ca.key"
SERVER_CERT = "server.crt"
SERVER_KEY = "server.key"
NODE_CLIENT_CERT = "node-client.crt"
NODE_CLIENT_KEY = "node-client.key"
NODE_CA_CERT = "node-ca.crt"
NODE_CA_KEY = "node-ca.key"
NODE_PREFIX = "system:node:"
NODES_GROUP = "system:nodes"
_VALIDITY = datetime.timedelta(days=3650)
_NODE_SERVING_VALIDITY = datetime.timedelta(days=365)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "gpushare")])


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def _ensure_ca(pki: Path, cert_name: str = CA_CERT, key_name: str = CA_KEY,
               common_name: str = "gpushare-ca"
               ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    ca_path, key_path = pki / cert_name, pki / key_name
    if ca_path.exists() and key_path.exists():
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        return x509.load_pem_x509_certificate(ca_path.read_bytes()), key
    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .sign(key, hashes.SHA256())
    )
    _write_key(key_path, key)
    ca_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


def _still_good(cert_path: Path, ca: x509.Certificate,
                wanted: list[x509.GeneralName]) -> bool:
    """Whether the serving certificate is the CA's and names every wanted address."""
    if not cert_path.exists():
        return False
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    try:
        cert.verify_directly_issued_by(ca)
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, TypeError, x509.ExtensionNotFound, InvalidSignature):
        return False
    return all(name in sans for name in wanted)


def ensure_ca(pki: Path) -> Path:
    """The CA certificate's path (made on first use)."""
    pki.mkdir(parents=True, exist_ok=True, mode=0o700)
    pki.chmod(0o700)
    _ensure_ca(pki)
    return pki / CA_CERT


def _ensure_node_ca(pki: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    return _ensure_ca(pki, NODE_CA_CERT, NODE_CA_KEY, "gpushare-kubelet-serving-ca")


def ensure_node_ca(pki: Path) -> Path:
    """The kubelet-serving CA's certificate path (made on first use): what the API server
    checks node agents' serving certificates against, and nothing else trusts."""
    pki.mkdir(parents=True, exist_ok=True, mode=0o700)
    pki.chmod(0o700)
    _ensure_node_ca(pki)
    return pki / NODE_CA_CERT


def ensure_node_client(pki: Path) -> tuple[Path, Path, Path]:
    """(ca.crt, node-client.crt, node-client.key): the identity the API server shows node
    agents, signed by the cluster CA (which the agents check callers against). Re-issued when
    it is missing or not the CA's."""
    ca_path = ensure_ca(pki)
    ca_cert, ca_key = _ensure_ca(pki)
    cert_path, key_path = pki / NODE_CLIENT_CERT, pki / NODE_CLIENT_KEY
    if key_path.exists() and cert_path.exists():
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        try:
            cert.verify_directly_issued_by(ca_cert)
            return ca_path, cert_path, key_path
        except (ValueError, TypeError, InvalidSignature):
            pass
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _issue(ca_cert, ca_key, x509.Name([
        x509.NameAttribute(NameOID.COMMON_NAME, NODE_CLIENT_NAME),
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "gpushare")]),
        key.public_key(), [], ExtendedKeyUsageOID.CLIENT_AUTH, _VALIDITY)
    _write_key(key_path, key)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return ca_path, cert_path, key_path


class CsrRefused(ValueError):
    """A certificate request the node-serving signer will not sign; the message says why."""


def _node_serving_names(csr: x509.CertificateSigningRequest) -> list[x509.GeneralName]:
    """The request's names, checked the way the kubelet-serving signer checks them."""
    if not csr.is_signature_valid:
        raise CsrRefused("the request's signature does not match its public key")
    cns = csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    orgs = [a.value for a in csr.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    if len(cns) != 1 or not str(cns[0].value).startswith(NODE_PREFIX) or \
            len(str(cns[0].value)) == len(NODE_PREFIX):
        raise CsrRefused(f"subject common name must be {NODE_PREFIX}<node name>")
    if orgs != [NODES_GROUP]:
        raise CsrRefused(f"subject organization must be exactly [{NODES_GROUP}]")
    try:
        sans = list(csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value)
    except x509.ExtensionNotFound:
        sans = []
    if not sans:
        raise CsrRefused("the request names no DNS name or IP address")
    for name in sans:
        if not isinstance(name, (x509.DNSName, x509.IPAddress)):
            raise CsrRefused("only DNS names and IP addresses may be requested, "
                             f"not {type(name).__name__}")
    return sans


def sign_node_serving(pki: Path, csr_pem: bytes) -> bytes:
    """A node agent's serving certificate for its CertificateSigningRequest, signed by the
    kubelet-serving CA (never the cluster CA): PEM of the certificate followed by that CA's,
    so the agent knows what it was signed with."""
    try:
        csr = x509.load_pem_x509_csr(csr_pem)
    except ValueError as e:
        raise CsrRefused(f"spec.request is not a PEM certificate request: {e}") from None
    sans = _node_serving_names(csr)
    ca_cert, ca_key = _ensure_node_ca(pki)
    public_key = csr.public_key()
    if not isinstance(public_key, (ec.EllipticCurvePublicKey, rsa.RSAPublicKey)):
        raise CsrRefused("the request's key must be EC or RSA")
    cert = _issue(ca_cert, ca_key, csr.subject, public_key, sans,
                  ExtendedKeyUsageOID.SERVER_AUTH, _NODE_SERVING_VALIDITY)
    return cert.public_bytes(serialization.Encoding.PEM) + \
        ca_cert.public_bytes(serialization.Encoding.PEM)


def _issue(ca_cert: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, subject: x509.Name,
           public_key: ec.EllipticCurvePublicKey | rsa.RSAPublicKey,
           sans: list[x509.GeneralName], usage: x509.ObjectIdentifier,
           validity: datetime.timedelta) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def ensure_certificates(pki: Path, hosts: list[str]) -> tuple[Path, Path, Path]:
    """(ca.crt, server.crt, server.key) for serving on `hosts` (and localhost)."""
    pki.mkdir(parents=True, exist_ok=True, mode=0o700)
    pki.chmod(0o700)
    cert_path, key_path = pki / SERVER_CERT, pki / SERVER_KEY
    wanted: list[x509.GeneralName] = [x509.DNSName("localhost"),
                                      x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    # pods reach the API through the `kubernetes` Service (its address and DNS names)
    wanted += [_san(API_SERVICE_IP), *(x509.DNSName(n) for n in API_SERVICE_NAMES)]
    for host in hosts:
        if _san(host) not in wanted:
            wanted.append(_san(host))
    ca_cert, ca_key = _ensure_ca(pki)
    if key_path.exists() and _still_good(cert_path, ca_cert, wanted):
        return pki / CA_CERT, cert_path, key_path
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _issue(ca_cert, ca_key, _name("gpushare-apiserver"), key.public_key(), wanted,
                  ExtendedKeyUsageOID.SERVER_AUTH, _VALIDITY)
    _write_key(key_path, key)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return pki / CA_CERT, cert_path, key_path
