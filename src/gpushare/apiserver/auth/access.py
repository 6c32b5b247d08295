"""Bearer-token authentication (`tokens.yaml`, read and written through
`gpushare.tokenfile`) and RBAC authorization.

A token's `clusters:` are the logical clusters it is valid in: by default root only, every
cluster for a system:masters token; ["!root"]: every cluster but root.

Members of `system:masters` may do anything; everybody else is authorized by the Roles,
ClusterRoles and bindings of the logical cluster the request is for.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpushare.apiserver.storage.store import Store
from gpushare.tokenfile import add_token, read_tokens, write_tokens

MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
ADMIN_USER = "admin"
ROOT_CLUSTER = "root"


@dataclass(frozen=True, slots=True)
class User:
    name: str
    groups: tuple[str, ...]
    clusters: tuple[str, ...] | None = None

    @property
    def is_admin(self) -> bool:
        return MASTERS in self.groups

    def valid_in(self, cluster: str) -> bool:
        """Whether the user's credentials hold in logical cluster `cluster`: every cluster
        without a list; else the clusters listed, or (a list of only ``!name`` entries)
        every cluster but those."""
        if self.clusters is None:
            return True
        if f"!{cluster}" in self.clusters:
            return False
        return cluster in self.clusters or all(c.startswith("!") for c in self.clusters)


@dataclass(frozen=True, slots=True)
class Attributes:
    verb: str
    group: str
    resource: str
    subresource: str
    namespace: str
    name: str


class TokenFile:
    """Tokens from `D/tokens.yaml`, re-read when the file changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._mtime = -1.0
        self._next_check = 0.0
        self._users: dict[str, User] = {}
        self.admin_token = ""
        self.ensure_admin()

    def ensure_admin(self) -> None:
        data = self._read()
        entries = data.setdefault("tokens", [])
        admin = next((e for e in entries if MASTERS in (e.get("groups") or ())), None)
        if admin is None:
            admin = {"token": secrets.token_urlsafe(32), "user": ADMIN_USER, "groups": [MASTERS]}
            entries.insert(0, admin)
            write_tokens(self.path, data)
        self.admin_token = str(admin["token"])
        self._reload(force=True)

    def _read(self) -> dict[str, Any]:
        return read_tokens(self.path)

    def _reload(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now < self._next_check:
            return
        self._next_check = now + 1.0  # look at the file at most once a second
        try:
            mtime = self.path.stat().st_mtime
        except FileNotFoundError:
            return
        if not force and mtime == self._mtime:
            return
        self._mtime = mtime
        users: dict[str, User] = {}
        for e in self._read().get("tokens") or ():
            if not isinstance(e, dict) or not e.get("token") or not e.get("user"):
                continue
            clusters = e.get("clusters")
            if not clusters and MASTERS not in (e.get("groups") or ()):
                # Only a cluster admin's token without `clusters:` works everywhere; anyone
                # else's is for the root cluster.
                clusters = [ROOT_CLUSTER]
            users[str(e["token"])] = User(
                str(e["user"]), (*[str(g) for g in e.get("groups") or ()], AUTHENTICATED),
                tuple(str(c) for c in clusters) if clusters else None)
        self._users = users

    def authenticate(self, token: str) -> User | None:
        self._reload()
        user = self._users.get(token)
        if user is None:
            # An unknown token may have been added a moment ago: look at the file now.
            self._next_check = 0.0
            self._reload()
            user = self._users.get(token)
        return user

    def token_of(self, user: str) -> str | None:
        """The first token of `user` in the file, if any."""
        for e in self._read().get("tokens") or ():
            if isinstance(e, dict) and e.get("user") == user and e.get("token"):
                return str(e["token"])
        return None

    def add(self, token: str, user: str, groups: list[str],
            clusters: list[str] | None = None) -> None:
        add_token(self.path, token, user, groups, clusters)
        self._reload(force=True)


RBAC = "rbac.authorization.k8s.io"


def _dicts(value: Any) -> list[dict[str, Any]]:
    """The objects of a list field (subjects, rules); skips shapes validation refuses, so
    one binding stored before validation cannot break every authorization."""
    if not isinstance(value, list):
        return []
    return [v for v in value if isinstance(v, dict)]


def _subject_matches(subject: dict[str, Any], user: User) -> bool:
    kind = subject.get("kind")
    name = subject.get("name")
    if kind == "User":
        return name == user.name
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        return user.name == f"system:serviceaccount:{subject.get('namespace')}:{name}"
    return False


def _strs(rule: dict[str, Any], key: str) -> list[str]:
    value = rule.get(key)
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _ref_name(ref: Any) -> str:
    name = ref.get("name") if isinstance(ref, dict) else None
    return name if isinstance(name, str) else ""


def _rule_allows(rule: dict[str, Any], attrs: Attributes) -> bool:
    verbs = _strs(rule, "verbs")
    if "*" not in verbs and attrs.verb not in verbs:
        return False
    groups = _strs(rule, "apiGroups")
    if "*" not in groups and attrs.group not in groups:
        return False
    resources = _strs(rule, "resources")
    wanted = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    if "*" not in resources and wanted not in resources and not (
        attrs.subresource and f"*/{attrs.subresource}" in resources
    ):
        return False
    names = _strs(rule, "resourceNames")
    return not names or attrs.name in names


class Authorizer:
    def __init__(self, store: Store) -> None:
        self.store = store

    def allowed(self, cluster: str, user: User, attrs: Attributes) -> bool:
        if user.is_admin:
            return True
        for rules in self._rules_for(cluster, user, attrs.namespace):
            for rule in rules:
                if isinstance(rule, dict) and _rule_allows(rule, attrs):
                    return True
        return False

    def non_resource_allowed(self, cluster: str, user: User, path: str, verb: str) -> bool:
        if user.is_admin:
            return True
        for rules in self._rules_for(cluster, user, ""):
            for rule in rules:
                urls = _strs(rule, "nonResourceURLs")
                verbs = _strs(rule, "verbs")
                if ("*" in verbs or verb in verbs) and any(
                    u == path or u == "*" or (u.endswith("*") and path.startswith(u[:-1]))
                    for u in urls
                ):
                    return True
        return False

    def rules(self, cluster: str, user: User, namespace: str) -> list[list[dict[str, Any]]]:
        """The rules of every role bound to `user` (cluster-wide and in `namespace`)."""
        return self._rules_for(cluster, user, namespace)

    def _rules_for(self, cluster: str, user: User, namespace: str) -> list[list[dict[str, Any]]]:
        out: list[list[dict[str, Any]]] = []
        store = self.store
        for crb in store.list(cluster, f"{RBAC}/clusterrolebindings"):
            if any(_subject_matches(s, user) for s in _dicts(crb.get("subjects"))):
                role = store.get(cluster, f"{RBAC}/clusterroles", "",
                                 _ref_name(crb.get("roleRef")))
                if role is not None:
                    out.append(_dicts(role.get("rules")))
        if namespace:
            for rb in store.list(cluster, f"{RBAC}/rolebindings", namespace):
                if not any(_subject_matches(s, user) for s in _dicts(rb.get("subjects"))):
                    continue
                ref = rb.get("roleRef")
                kind = ref.get("kind") if isinstance(ref, dict) else None
                if kind == "ClusterRole":
                    role = store.get(cluster, f"{RBAC}/clusterroles", "", _ref_name(ref))
                else:
                    role = store.get(cluster, f"{RBAC}/roles", namespace, _ref_name(ref))
                if role is not None:
                    out.append(_dicts(role.get("rules")))
        return out
