"""ServiceAccount tokens: TokenRequest, their authentication, TokenReview, pod admission.

Tokens are JWTs (ES256) signed with `D/pki/sa.key`, with the claims Kubernetes' bound tokens
carry (`iss`, `sub`, `aud`, `exp`, `iat`, `nbf`, `jti` and the `kubernetes.io` claim naming
the namespace, the ServiceAccount and, for a pod's token, the pod). One more claim,
`gpushare.io/cluster`, ties a token to the logical cluster it was issued in: it authenticates
there and nowhere else. A token stops authenticating when it expires, when its
ServiceAccount is deleted (or re-created: the uid differs), or when the pod it is bound to is.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from gpushare.api.serviceaccounts import (
    API_AUDIENCE,
    ISSUER,
    KUBELET_TOKEN_EXPIRATION,
    ROOT_CA_CONFIGMAP,
    TOKEN_MOUNT_PATH,
)
from gpushare.api.timefmt import rfc3339
from gpushare.apiserver.auth.access import AUTHENTICATED, User
from gpushare.apiserver.errors import ApiError, Cause, bad_request, invalid, not_found
from gpushare.apiserver.storage.store import Store

SIGNING_KEY = "sa.key"
CLUSTER_CLAIM = "gpushare.io/cluster"
DEFAULT_EXPIRATION = 3600
MIN_EXPIRATION = 600
MAX_EXPIRATION = 2**32

SERVICE_ACCOUNTS = "system:serviceaccounts"


def service_account_user(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


def service_account_groups(namespace: str) -> tuple[str, ...]:
    return (SERVICE_ACCOUNTS, f"{SERVICE_ACCOUNTS}:{namespace}", AUTHENTICATED)


def _load_or_create_key(path: Path) -> ec.EllipticCurvePrivateKey:
    if path.exists():
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise RuntimeError(f"{path}: not an EC private key")
        return key
    key = ec.generate_private_key(ec.SECP256R1())
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_suffix(".tmp")
    fd = tmp.open("wb")
    tmp.chmod(0o600)
    with fd:
        fd.write(key.private_bytes(serialization.Encoding.PEM,
                                   serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption()))
    tmp.replace(path)
    return key


class TokenSigner:
    """Signs and verifies ServiceAccount JWTs with one EC P-256 key."""

    def __init__(self, key_path: Path | None = None) -> None:
        self.key = (_load_or_create_key(key_path) if key_path is not None
                    else ec.generate_private_key(ec.SECP256R1()))
        self.public_key = self.key.public_key()
        der = self.public_key.public_bytes(serialization.Encoding.DER,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
        self.kid = base64.urlsafe_b64encode(hashlib.sha256(der).digest()).rstrip(b"=").decode()

    def sign(self, claims: dict[str, Any]) -> str:
        return jwt.encode(claims, self.key, algorithm="ES256", headers={"kid": self.kid})

    def verify(self, token: str) -> dict[str, Any] | None:
        """The claims of a token this signer issued and that has not expired, else None."""
        try:
            claims = jwt.decode(token, self.public_key, algorithms=["ES256"], issuer=ISSUER,
                                options={"verify_aud": False,
                                         "require": ["exp", "iat", "sub", "aud"]})
        except jwt.PyJWTError:
            return None
        return claims if isinstance(claims, dict) else None


def looks_like_jwt(token: str) -> bool:
    return token.count(".") == 2 and token.startswith("eyJ")


@dataclass(frozen=True, slots=True)
class Review:
    """What authenticating a ServiceAccount token found."""

    user: User
    uid: str
    audiences: tuple[str, ...]
    extra: dict[str, list[str]]


class ServiceAccountTokens:
    """Issues TokenRequests and authenticates the tokens against the store."""

    def __init__(self, store: Store, signer: TokenSigner) -> None:
        self.store = store
        self.signer = signer

    # -- TokenRequest -----------------------------------------------------------------------

    def request(self, cluster: str, ns: str, name: str, body: Any) -> dict[str, Any]:
        """Answer a TokenRequest for the ServiceAccount ns/name."""
        sa = self.store.get(cluster, "serviceaccounts", ns, name)
        if sa is None:
            raise not_found("", "serviceaccounts", name)
        if body is None:
            body = {}
        if not isinstance(body, dict):
            raise bad_request("the request body must be a TokenRequest")
        spec = body.get("spec") or {}
        if not isinstance(spec, dict):
            raise invalid("authentication.k8s.io", "TokenRequest", name,
                          [Cause("spec", "must be an object")])
        audiences = spec.get("audiences") or [API_AUDIENCE]
        if not isinstance(audiences, list) or not all(isinstance(a, str) and a
                                                      for a in audiences):
            raise invalid("authentication.k8s.io", "TokenRequest", name, [Cause(
                "spec.audiences", "must be a list of non-empty strings")])
        seconds = spec.get("expirationSeconds", DEFAULT_EXPIRATION)
        if seconds is None:
            seconds = DEFAULT_EXPIRATION
        if isinstance(seconds, bool) or not isinstance(seconds, int):
            raise invalid("authentication.k8s.io", "TokenRequest", name, [Cause(
                "spec.expirationSeconds", f"Invalid value: {seconds!r}: must be an integer")])
        if seconds < MIN_EXPIRATION:
            raise invalid("authentication.k8s.io", "TokenRequest", name, [Cause(
                "spec.expirationSeconds",
                "may not specify a duration less than 10 minutes")])
        if seconds > MAX_EXPIRATION:
            raise invalid("authentication.k8s.io", "TokenRequest", name, [Cause(
                "spec.expirationSeconds", "may not specify a duration larger than 2^32 seconds")])
        k8s_claim: dict[str, Any] = {
            "namespace": ns,
            "serviceaccount": {"name": name, "uid": sa["metadata"].get("uid", "")},
        }
        ref = spec.get("boundObjectRef")
        out_ref: dict[str, Any] | None = None
        if ref:
            out_ref = self._bound_pod(cluster, ns, name, ref)
            k8s_claim["pod"] = {"name": out_ref["name"], "uid": out_ref["uid"]}
        now = int(time.time())
        claims = {"iss": ISSUER, "sub": service_account_user(ns, name), "aud": audiences,
                  "iat": now, "nbf": now, "exp": now + seconds, "jti": str(uuid.uuid4()),
                  "kubernetes.io": k8s_claim, CLUSTER_CLAIM: cluster}
        token = self.signer.sign(claims)
        expires = datetime.datetime.fromtimestamp(now + seconds, datetime.UTC)
        out_spec: dict[str, Any] = {"audiences": audiences, "expirationSeconds": seconds}
        if out_ref is not None:
            out_spec["boundObjectRef"] = out_ref
        return {
            "kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": ns,
                         "creationTimestamp": rfc3339(now)},
            "spec": out_spec,
            "status": {"token": token,
                       "expirationTimestamp": rfc3339(expires.timestamp())},
        }

    def _bound_pod(self, cluster: str, ns: str, sa_name: str, ref: Any) -> dict[str, Any]:
        def refuse(field: str, message: str) -> ApiError:
            return invalid("authentication.k8s.io", "TokenRequest", sa_name,
                           [Cause(f"spec.boundObjectRef.{field}", message)])

        if not isinstance(ref, dict):
            raise refuse("kind", "must be an object")
        if ref.get("kind") != "Pod":
            raise refuse("kind", f'Unsupported value: "{ref.get("kind")}": supported values: '
                                 '"Pod"')
        if ref.get("apiVersion") not in (None, "", "v1"):
            raise refuse("apiVersion", 'Unsupported value: supported values: "v1"')
        pod = self.store.get(cluster, "pods", ns, str(ref.get("name") or ""))
        if pod is None:
            raise not_found("", "pods", str(ref.get("name") or ""))
        uid = pod["metadata"].get("uid", "")
        if ref.get("uid") and ref["uid"] != uid:
            raise ApiError(409, f'the UID in the bound object reference ({ref["uid"]}) does '
                                f'not match the pod ({uid})', "Conflict")
        if (pod.get("spec") or {}).get("serviceAccountName", "default") != sa_name:
            raise refuse("name", f'pod "{pod["metadata"]["name"]}" does not run as the '
                                 f'ServiceAccount "{sa_name}"')
        return {"kind": "Pod", "apiVersion": "v1", "name": pod["metadata"]["name"], "uid": uid}

    # -- authentication ---------------------------------------------------------------------

    def review(self, token: str, audiences: tuple[str, ...] = (API_AUDIENCE,)) -> Review | None:
        """The identity of a valid token meant for one of `audiences`, else None."""
        if not looks_like_jwt(token):
            return None
        claims = self.signer.verify(token)
        if claims is None:
            return None
        token_aud = claims.get("aud")
        if isinstance(token_aud, str):
            token_aud = [token_aud]
        if not isinstance(token_aud, list):
            return None
        matched = tuple(a for a in audiences if a in token_aud)
        if not matched:
            return None
        info = claims.get("kubernetes.io")
        cluster = claims.get(CLUSTER_CLAIM)
        if not isinstance(info, dict) or not isinstance(cluster, str):
            return None
        ns = info.get("namespace")
        sa_claim = info.get("serviceaccount") or {}
        if not isinstance(ns, str) or not isinstance(sa_claim, dict):
            return None
        name = str(sa_claim.get("name") or "")
        sa = self.store.get(cluster, "serviceaccounts", ns, name)
        if sa is None or sa["metadata"].get("uid") != sa_claim.get("uid"):
            return None  # the ServiceAccount is gone (or is another one by the same name)
        extra: dict[str, list[str]] = {}
        pod_claim = info.get("pod")
        if pod_claim is not None:
            if not isinstance(pod_claim, dict):
                return None
            pod = self.store.get(cluster, "pods", ns, str(pod_claim.get("name") or ""))
            if pod is None or pod["metadata"].get("uid") != pod_claim.get("uid"):
                return None  # the pod the token was bound to is gone
            extra["authentication.kubernetes.io/pod-name"] = [str(pod_claim["name"])]
            extra["authentication.kubernetes.io/pod-uid"] = [str(pod_claim["uid"])]
            node = (pod.get("spec") or {}).get("nodeName")
            if node:
                extra["authentication.kubernetes.io/node-name"] = [str(node)]
        if claims.get("jti"):
            extra["authentication.kubernetes.io/credential-id"] = [f"JTI={claims['jti']}"]
        user = User(service_account_user(ns, name), service_account_groups(ns), (cluster,))
        return Review(user, str(sa["metadata"].get("uid", "")), matched, extra)

    def authenticate(self, token: str) -> User | None:
        review = self.review(token)
        return review.user if review is not None else None




# -- the ServiceAccount admission plugin ---------------------------------------------------------


def admit_pod(store: Store, cluster: str, pod: dict[str, Any], suffix: str) -> None:
    """On pod create: the ServiceAccount must exist; mount its token unless opted out.

    Like Kubernetes, the token arrives through a projected volume `kube-api-access-*` (a
    bound ServiceAccount token, the cluster's CA and the namespace), mounted read-only at
    the standard path in every container. `automountServiceAccountToken: false` on the pod,
    or on the ServiceAccount when the pod does not say, leaves it out.
    """
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    ns = pod["metadata"].get("namespace") or ""
    sa_name = str(spec.get("serviceAccountName") or "default")
    sa = store.get(cluster, "serviceaccounts", ns, sa_name)
    if sa is None:
        raise ApiError(403, f'pods "{pod["metadata"].get("name", "")}" is forbidden: error '
                            f"looking up service account {ns}/{sa_name}: serviceaccount "
                            f'"{sa_name}" not found', "Forbidden",
                       {"name": pod["metadata"].get("name", ""), "kind": "pods"})
    automount = spec.get("automountServiceAccountToken")
    if automount is None:
        automount = sa.get("automountServiceAccountToken")
    if automount is False:
        return
    containers = [c for key in ("initContainers", "containers")
                  for c in spec.get(key) or () if isinstance(c, dict)]
    if any(isinstance(m, dict) and m.get("mountPath") == TOKEN_MOUNT_PATH
           for c in containers for m in c.get("volumeMounts") or ()):
        return  # the pod brings its own
    volumes = spec.get("volumes")
    if volumes is None:
        volumes = spec["volumes"] = []
    if not isinstance(volumes, list):
        return  # validation names the field
    volume_name = f"kube-api-access-{suffix}"
    volumes.append(projected_token_volume(volume_name))
    for c in containers:
        mounts = c.setdefault("volumeMounts", [])
        if isinstance(mounts, list):
            mounts.append({"name": volume_name, "readOnly": True, "mountPath": TOKEN_MOUNT_PATH})


def projected_token_volume(name: str) -> dict[str, Any]:
    return {"name": name, "projected": {"defaultMode": 0o644, "sources": [
        {"serviceAccountToken": {"expirationSeconds": KUBELET_TOKEN_EXPIRATION,
                                 "path": "token"}},
        {"configMap": {"name": ROOT_CA_CONFIGMAP,
                       "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
            "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
    ]}}


def token_review(tokens: ServiceAccountTokens, static_user: User | None, cluster: str,
                 body: Any) -> dict[str, Any]:
    """Answer a TokenReview (`authentication.k8s.io/v1`) asked in `cluster`."""
    if not isinstance(body, dict):
        raise bad_request("the request body must be a TokenReview")
    spec = body.get("spec") or {}
    token = spec.get("token") if isinstance(spec, dict) else None
    if not isinstance(token, str) or not token:
        raise invalid("authentication.k8s.io", "TokenReview", "",
                      [Cause("spec.token", "Required value", "FieldValueRequired")])
    wanted = spec.get("audiences") or [API_AUDIENCE]
    if not isinstance(wanted, list) or not all(isinstance(a, str) for a in wanted):
        raise invalid("authentication.k8s.io", "TokenReview", "",
                      [Cause("spec.audiences", "must be a list of strings")])
    status: dict[str, Any] = {"authenticated": False}
    review = tokens.review(token, tuple(wanted))
    if review is not None and review.user.clusters == (cluster,):
        status = {"authenticated": True, "audiences": list(review.audiences),
                  "user": {"username": review.user.name, "uid": review.uid,
                           "groups": list(review.user.groups), "extra": review.extra}}
    elif static_user is not None and API_AUDIENCE in wanted and static_user.valid_in(cluster):
        # Static tokens are meant for the API server itself.
        status = {"authenticated": True, "audiences": [API_AUDIENCE],
                  "user": {"username": static_user.name, "groups": list(static_user.groups)}}
    if not status["authenticated"]:
        status["error"] = "the token is not valid (expired, revoked, malformed or meant " \
                          "for another audience or logical cluster)"
    return {"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"creationTimestamp": None}, "spec": spec, "status": status}
