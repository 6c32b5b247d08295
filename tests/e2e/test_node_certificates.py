"""The kubelet-serving signer and the reviews node agents ask: a node's certificate request
that its own identity may not approve waits for `kubectl certificate approve`; a request
that does not look like a node's is refused with a Failed condition; SubjectAccessReview
answers from RBAC."""

from __future__ import annotations

import base64
import datetime
import json
import subprocess
import sys
import threading
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from e2e_support import wait_for
from kubernetes import client, config

from gpushare.agent.node.nodecert import NodeTls, ensure_serving_certificate
from gpushare.kube.client import KubeClient

CSR_RULES = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: csr-requester}
rules:
- apiGroups: [certificates.k8s.io]
  resources: [certificatesigningrequests]
  verbs: [create, get, list, watch]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: csr-requester}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: csr-requester}
subjects: [{kind: User, name: restricted-node, apiGroup: rbac.authorization.k8s.io}]
"""


def _user_kubeconfig(server, user: str, path: Path) -> Path:
    done = subprocess.run(
        [sys.executable, "-m", "gpushare.cli.main", "kubeconfig", "--data-dir",
         str(server.data_dir), "--user", user, "-o", str(path)],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return path


def test_a_request_the_agent_may_not_approve_waits_for_an_administrator(
        server, kubectl, tmp_path: Path) -> None:
    kubectl.run("apply", "-f", "-", stdin=CSR_RULES)
    restricted = KubeClient.from_kubeconfig(
        str(_user_kubeconfig(server, "restricted-node", tmp_path / "node.kubeconfig")))
    got: list[NodeTls | BaseException] = []

    def bootstrap() -> None:
        try:
            got.append(ensure_serving_certificate(restricted, "waiting-node", "127.0.0.1",
                                                  "waiting-node", tmp_path / "pki", 60))
        except BaseException as exc:  # handed to the test thread
            got.append(exc)

    thread = threading.Thread(target=bootstrap, daemon=True)
    thread.start()
    name = wait_for(lambda: next(
        (c["metadata"]["name"] for c in kubectl.json("get", "csr")["items"]
         if c["metadata"]["name"].startswith("node-serving-waiting-node-")), None), 30)
    pending = kubectl.json("get", "csr", name)
    assert not (pending.get("status") or {}).get("conditions"), pending["status"]
    assert not got  # still waiting: its identity could not approve
    kubectl.run("certificate", "approve", name)
    thread.join(30)
    restricted.close()
    assert len(got) == 1 and isinstance(got[0], NodeTls), got
    cert = x509.load_pem_x509_certificate(got[0].cert.read_bytes())
    assert cert.subject.rfc4514_string() == "CN=system:node:waiting-node,O=system:nodes"
    assert got[0].key.stat().st_mode & 0o777 == 0o600
    signed = kubectl.json("get", "csr", name)["status"]
    assert base64.b64decode(signed["certificate"]) == got[0].cert.read_bytes()


def _request(common_name: str, organization: str) -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    csr = (x509.CertificateSigningRequestBuilder()
           .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization),
                                    x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
           .add_extension(x509.SubjectAlternativeName([x509.DNSName("box")]), critical=False)
           .sign(key, hashes.SHA256()))
    return base64.b64encode(csr.public_bytes(serialization.Encoding.PEM)).decode()


def test_the_signer_refuses_what_is_not_a_nodes_serving_request(kubectl) -> None:
    for name, cn, org, usages in (
            ("not-a-node", "admin", "system:nodes", ["digital signature", "server auth"]),
            ("wrong-group", "system:node:box", "system:masters",
             ["digital signature", "server auth"]),
            ("client-usage", "system:node:box", "system:nodes",
             ["digital signature", "client auth"])):
        body = {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
                "metadata": {"name": name},
                "spec": {"request": _request(cn, org), "usages": usages,
                         "signerName": "kubernetes.io/kubelet-serving"}}
        kubectl.run("apply", "-f", "-", stdin=json.dumps(body))
        kubectl.run("certificate", "approve", name)
        status = kubectl.json("get", "csr", name)["status"]
        assert not status.get("certificate"), name
        failed = [c for c in status["conditions"] if c["type"] == "Failed"]
        assert failed and failed[0]["reason"] == "SignerValidationFailure", status
    # a good one is signed, so the refusals above are about the requests
    good = {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"name": "good-node"},
            "spec": {"request": _request("system:node:box", "system:nodes"),
                     "usages": ["digital signature", "server auth"],
                     "signerName": "kubernetes.io/kubelet-serving"}}
    kubectl.run("apply", "-f", "-", stdin=json.dumps(good))
    kubectl.run("certificate", "approve", "good-node")
    assert kubectl.json("get", "csr", "good-node")["status"]["certificate"]
    # another signer's request is approved and left unsigned, for its own controller
    other = dict(good, metadata={"name": "other-signer"})
    other["spec"] = dict(good["spec"], signerName="example.com/custom")
    kubectl.run("apply", "-f", "-", stdin=json.dumps(other))
    kubectl.run("certificate", "approve", "other-signer")
    status = kubectl.json("get", "csr", "other-signer")["status"]
    assert [c["type"] for c in status["conditions"]] == ["Approved"]
    assert not status.get("certificate")


def test_subject_access_review_answers_from_rbac(server, kubectl) -> None:
    kubectl.run("create", "clusterrole", "node-proxy", "--verb=get",
                "--resource=nodes/proxy")
    kubectl.run("create", "clusterrolebinding", "proxy-reader", "--clusterrole=node-proxy",
                "--user=reader")
    api = config.new_client_from_config(str(server.kubeconfig))
    try:
        authz = client.AuthorizationV1Api(api)

        def allowed(user: str, verb: str) -> bool:
            review = authz.create_subject_access_review({
                "spec": {"user": user, "resourceAttributes": {
                    "verb": verb, "resource": "nodes", "subresource": "proxy",
                    "name": "n1"}}})
            return bool(review.status.allowed)

        assert allowed("reader", "get")
        assert not allowed("reader", "create")
        assert not allowed("somebody-else", "get")
    finally:
        api.close()


def test_only_a_caller_allowed_to_create_reviews_may_ask(server, tmp_path: Path) -> None:
    asker = config.new_client_from_config(
        str(_user_kubeconfig(server, "curious", tmp_path / "curious.kubeconfig")))
    try:
        authz = client.AuthorizationV1Api(asker)
        try:
            authz.create_subject_access_review({"spec": {"user": "x", "resourceAttributes": {
                "verb": "get", "resource": "pods"}}})
        except client.ApiException as exc:
            assert exc.status == 403 and "subjectaccessreviews" in exc.body
        else:
            raise AssertionError("a user without the permission asked a review")
    finally:
        asker.close()


def _near_expiry(tls: NodeTls, pki: Path) -> None:
    """Re-sign the node's certificate (same key and names) with a fifth of its life left."""
    from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey

    now = datetime.datetime.now(datetime.UTC)
    cert = x509.load_pem_x509_certificate(tls.cert.read_bytes())
    ca = x509.load_pem_x509_certificate((pki / "node-ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((pki / "node-ca.key").read_bytes(), None)
    assert isinstance(ca_key, EllipticCurvePrivateKey)
    builder = (x509.CertificateBuilder().subject_name(cert.subject).issuer_name(ca.subject)
               .public_key(cert.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(days=10))
               .not_valid_after(now + datetime.timedelta(days=1)))
    for extension in cert.extensions:
        builder = builder.add_extension(extension.value, extension.critical)
    tls.cert.write_bytes(builder.sign(ca_key, hashes.SHA256()).public_bytes(
        serialization.Encoding.PEM) + ca.public_bytes(serialization.Encoding.PEM))


def test_a_certificate_near_its_end_is_renewed_and_a_good_one_kept(server, kubectl,
                                                                    tmp_path: Path) -> None:
    kube = KubeClient.from_kubeconfig(str(server.kubeconfig))
    try:
        first = ensure_serving_certificate(kube, "renewing", "127.0.0.1", "renewing",
                                           tmp_path / "pki", 30)
        kept = ensure_serving_certificate(kube, "renewing", "127.0.0.1", "renewing",
                                          tmp_path / "pki", 30)
        assert kept.cert.read_bytes() == first.cert.read_bytes()
        _near_expiry(first, server.data_dir / "pki")
        old = first.cert.read_bytes()
        renewed = ensure_serving_certificate(kube, "renewing", "127.0.0.1", "renewing",
                                             tmp_path / "pki", 30)
    finally:
        kube.close()
    fresh = x509.load_pem_x509_certificate(renewed.cert.read_bytes())
    assert renewed.cert.read_bytes() != old
    life = fresh.not_valid_after_utc - datetime.datetime.now(datetime.UTC)
    assert life > datetime.timedelta(days=300)
    requests = [c for c in kubectl.json("get", "csr")["items"]
                if c["metadata"]["name"].startswith("node-serving-renewing-")]
    assert len(requests) == 2
    # the usages a real kubelet-serving signer of any version signs
    assert {tuple(c["spec"]["usages"]) for c in requests} == {
        ("digital signature", "key encipherment", "server auth")}
