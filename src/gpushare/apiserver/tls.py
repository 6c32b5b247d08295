"""Serving certificates: a self-signed CA and a server certificate kept in `D/pki/`.

kubectl only sends bearer tokens over TLS, so the API is served over HTTPS; the admin
kubeconfig carries the CA so clients verify the server. The CA is made once and kept, so
kubeconfigs stay valid; the server certificate is re-issued when it does not name the
address the server listens on.
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_CERT = "ca.crt"
CA_KEY = "ca.key"
SERVER_CERT = "server.crt"
SERVER_KEY = "server.key"
_VALIDITY = datetime.timedelta(days=3650)


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


def _ensure_ca(pki: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    ca_path, key_path = pki / CA_CERT, pki / CA_KEY
    if ca_path.exists() and key_path.exists():
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        return x509.load_pem_x509_certificate(ca_path.read_bytes()), key
    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("gpushare-ca"))
        .issuer_name(_name("gpushare-ca"))
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


def ensure_certificates(pki: Path, hosts: list[str]) -> tuple[Path, Path, Path]:
    """(ca.crt, server.crt, server.key) for serving on `hosts` (and localhost)."""
    pki.mkdir(parents=True, exist_ok=True, mode=0o700)
    pki.chmod(0o700)
    cert_path, key_path = pki / SERVER_CERT, pki / SERVER_KEY
    wanted: list[x509.GeneralName] = [x509.DNSName("localhost"),
                                      x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    for host in hosts:
        if _san(host) not in wanted:
            wanted.append(_san(host))
    ca_cert, ca_key = _ensure_ca(pki)
    if key_path.exists() and _still_good(cert_path, ca_cert, wanted):
        return pki / CA_CERT, cert_path, key_path
    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("gpushare-apiserver"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.SubjectAlternativeName(wanted), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    _write_key(key_path, key)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return pki / CA_CERT, cert_path, key_path
