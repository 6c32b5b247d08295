"""Tenant tokens in the API server's ``tokens.yaml``: issued per virtual cluster, valid in
that logical cluster only (``clusters: [<tenant>]``), removed with it."""

from __future__ import annotations

import secrets
from pathlib import Path

from gpushare.tenancy import names
from gpushare.tokenfile import add_token, remove_cluster_tokens, token_entries


def tenant_token(path: Path, tenant: str, uid: str, user: str | None = None) -> tuple[str, str]:
    """(user, token) for ``tenant``: its admin (cluster-admin there), or with ``user`` a
    plain user of that cluster whose rights are what the tenant's RBAC gives it. An
    existing token is reused."""
    if user is None:
        user, groups = names.admin_user(tenant), [names.admins_group(uid)]
    else:
        groups = []
    for entry in token_entries(path):
        if (entry.get("user") == user and list(entry.get("groups") or []) == groups
                and list(entry.get("clusters") or []) == [tenant] and entry.get("token")):
            return user, str(entry["token"])
    token = secrets.token_urlsafe(32)
    add_token(path, token, user, groups, [tenant])
    return user, token


def remove_tenant_tokens(path: Path, tenant: str) -> int:
    """Remove every token valid only in ``tenant``; how many went."""
    return remove_cluster_tokens(path, tenant)
