"""Who may use the agent's node endpoint, decided as a kubelet's webhook authn/authz does.

Who gets in:

* the API server, by its client certificate: signed by the cluster CA (the TLS handshake
  checks that) and naming `gpushare:apiserver-node-client`;
* another client certificate of the cluster CA (a kube-apiserver's kubelet client, say):
  its common name is the user and its organizations the groups, and a SubjectAccessReview
  must allow that user `<verb> nodes/proxy` on this node (`get` for reads, `create` for
  exec, attach and port-forward);
* a bearer token that the API's TokenReview authenticates and whose user the same
  SubjectAccessReview allows.

Anybody else gets 401 (no usable credentials) or 403 (known, not allowed). Answers are kept
for a short while so a follow or a burst of requests does not ask the API each time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpushare.api.contracts import NODE_CLIENT_NAME
from gpushare.kube.client import KubeClient, Resource

TOKEN_REVIEWS = Resource("authentication.k8s.io/v1", "tokenreviews", False)
ACCESS_REVIEWS = Resource("authorization.k8s.io/v1", "subjectaccessreviews", False)
_CACHE_S = 30.0


@dataclass(frozen=True, slots=True)
class Verdict:
    code: int  # 200 allowed, 401, 403
    message: str
    kept: bool = True  # False: the API could not answer; ask again next time

    @property
    def allowed(self) -> bool:
        return self.code == 200


def _subject(peercert: dict[str, Any] | None, key: str) -> list[str]:
    return [str(value) for rdn in (peercert or {}).get("subject", ()) for k, value in rdn
            if k == key]


def _common_name(peercert: dict[str, Any] | None) -> str | None:
    names = _subject(peercert, "commonName")
    return names[0] if names else None


class CallerCheck:
    def __init__(self, kube: KubeClient, node: str) -> None:
        self._kube = kube
        self._node = node
        self._cache: dict[tuple[str, str, str], tuple[float, Verdict]] = {}
        self._lock = threading.Lock()

    def check(self, peercert: dict[str, Any] | None, authorization: str, verb: str) -> Verdict:
        """`peercert` as `SSLSocket.getpeercert()` gives it (only for a certificate the CA
        signed), the Authorization header, and the verb the request needs."""
        name = _common_name(peercert)
        if name == NODE_CLIENT_NAME:
            return Verdict(200, "the API server")
        if name:
            user = {"username": name, "groups": _subject(peercert, "organizationName")}
            return self._cached(("x509", name, verb), lambda: self._access(user, verb))
        if authorization[:7].lower() != "bearer " or not authorization[7:].strip():
            return Verdict(401, "Unauthorized")
        token = authorization[7:].strip()
        return self._cached(("token", token, verb), lambda: self._review(token, verb))

    def _cached(self, key: tuple[str, str, str], decide: Callable[[], Verdict]) -> Verdict:
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None and cached[0] > now:
                return cached[1]
        verdict = decide()
        with self._lock:
            if len(self._cache) > 1024:
                self._cache.clear()
            if verdict.kept:
                self._cache[key] = (now + _CACHE_S, verdict)
        return verdict

    def _review(self, token: str, verb: str) -> Verdict:
        try:
            review = self._kube.create(TOKEN_REVIEWS.collection(), {
                "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": {"token": token}})
        except Exception as exc:  # the API could not answer (away, TLS, a bad reply)
            return Verdict(401, f"the token could not be reviewed: {exc}", kept=False)
        status = review.get("status") or {}
        if not status.get("authenticated"):
            return Verdict(401, "Unauthorized")
        return self._access(status.get("user") or {}, verb)

    def _access(self, user: dict[str, Any], verb: str) -> Verdict:
        try:
            access = self._kube.create(ACCESS_REVIEWS.collection(), {
                "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": {"user": user.get("username", ""), "groups": user.get("groups") or [],
                         "uid": user.get("uid", ""), "extra": user.get("extra") or {},
                         "resourceAttributes": {"verb": verb, "resource": "nodes",
                                                "subresource": "proxy", "name": self._node}}})
        except Exception as exc:  # as above: refused, and asked again next time
            return Verdict(403, f"the access could not be reviewed: {exc}", kept=False)
        if (access.get("status") or {}).get("allowed"):
            return Verdict(200, str(user.get("username", "")))
        return Verdict(403, f'Forbidden (user={user.get("username", "")}, verb={verb}, '
                            f"resource=nodes, subresource=proxy)")
