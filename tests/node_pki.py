"""Test certificates for the API server ↔ node agent link, made with the product's own CA
code: a node serving certificate signed through the kubelet-serving signer, and client
certificates (the API server's, and ones that must be refused)."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gpushare.agent.node.nodecert import NodeTls
from gpushare.apiserver.auth.tls import CA_CERT, CA_KEY, ensure_node_client, sign_node_serving


def _key_file(path: Path, key: ec.EllipticCurvePrivateKey) -> Path:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    return path


def node_tls(pki: Path, out: Path, node: str = "n") -> NodeTls:
    """A serving certificate for `node` on 127.0.0.1, signed by the CA in `pki`."""
    ca, _, _ = ensure_node_client(pki)
    key = ec.generate_private_key(ec.SECP256R1())
    csr = (x509.CertificateSigningRequestBuilder()
           .subject_name(x509.Name([
               x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
               x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node}")]))
           .add_extension(x509.SubjectAlternativeName([
               x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
               critical=False)
           .sign(key, hashes.SHA256()))
    out.mkdir(parents=True, exist_ok=True)
    cert = out / "node.crt"
    cert.write_bytes(sign_node_serving(pki, csr.public_bytes(serialization.Encoding.PEM)))
    return NodeTls(ca, cert, _key_file(out / "node.key", key))


def client_cert(out: Path, name: str, pki: Path | None,
                organizations: tuple[str, ...] = ()) -> tuple[Path, Path]:
    """A client certificate named `name` (in `organizations`), signed by the CA in `pki`
    (None: by a CA of its own, which the node must not trust)."""
    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([*(x509.NameAttribute(NameOID.ORGANIZATION_NAME, o)
                           for o in organizations),
                         x509.NameAttribute(NameOID.COMMON_NAME, name)])
    if pki is not None:
        ca_cert = x509.load_pem_x509_certificate((pki / CA_CERT).read_bytes())
        loaded = serialization.load_pem_private_key((pki / CA_KEY).read_bytes(), None)
        assert isinstance(loaded, ec.EllipticCurvePrivateKey)
        issuer, signer = ca_cert.subject, loaded
    else:
        issuer, signer = subject, key
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(signer, hashes.SHA256()))
    out.mkdir(parents=True, exist_ok=True)
    cert_path = out / f"{name.replace(':', '_')}.crt"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, _key_file(out / f"{name.replace(':', '_')}.key", key)
