"""Tenant tokens in the API server's ``tokens.yaml``: issued per virtual cluster, valid in
that logical cluster only (``clusters: [<tenant>]``), removed with it."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

import yaml

from gpushare.apiserver.auth.access import TokenFile
from gpushare.tenancy import names


def _entries(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    data = yaml.safe_load(path.read_text()) or {}
    entries = data.get("tokens") if isinstance(data, dict) else None
    return [e for e in entries or () if isinstance(e, dict)]


def tenant_token(path: Path, tenant: str, uid: str, user: str | None = None) -> tuple[str, str]:
    """(user, token) for ``tenant``: its admin (cluster-admin there), or with ``user`` a
    plain user of that cluster whose rights are what the tenant's RBAC gives it. An
    existing token is reused."""
    if user is None:
        user, groups = names.admin_user(tenant), [names.admins_group(uid)]
    else:
        groups = []
    for entry in _entries(path):
        if (entry.get("user") == user and list(entry.get("groups") or []) == groups
                and list(entry.get("clusters") or []) == [tenant] and entry.get("token")):
            return user, str(entry["token"])
    token = secrets.token_urlsafe(32)
    TokenFile(path).add(token, user, groups, [tenant])
    return user, token


def remove_tenant_tokens(path: Path, tenant: str) -> int:
    """Remove every token valid only in ``tenant``; how many went."""
    if not path.exists():
        return 0
    data = yaml.safe_load(path.read_text()) or {}
    entries = data.get("tokens") or []
    kept = [e for e in entries if not (isinstance(e, dict)
                                       and list(e.get("clusters") or []) == [tenant])]
    if len(kept) == len(entries):
        return 0
    data["tokens"] = kept
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(data, sort_keys=False))
    os.chmod(tmp, 0o600)
    tmp.replace(path)
    return len(entries) - len(kept)
