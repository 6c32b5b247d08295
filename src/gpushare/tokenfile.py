"""The bearer-token file of the API server (`tokens.yaml`), its one home: the server reads
it to authenticate, the command line and the tenancy controller add and remove entries.

    tokens:
    - token: <secret>
      user: admin
      groups: [system:masters]
      clusters: [root]        # logical clusters the token is valid in (see
                              # `gpushare.apiserver.auth.access.User.valid_in`)

Every write replaces the file whole (a temporary file, mode 0600, renamed over it), so a
reader never sees half of one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml


def read_tokens(path: Path) -> dict[str, Any]:
    """The file's document; ``{"tokens": []}`` when it is missing or not a mapping."""
    if not path.exists():
        return {"tokens": []}
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        return {"tokens": []}
    return data


def token_entries(path: Path) -> list[dict[str, Any]]:
    """The entries of the file that are mappings, in order."""
    entries = read_tokens(path).get("tokens")
    return [e for e in entries or () if isinstance(e, dict)]


def write_tokens(path: Path, data: dict[str, Any]) -> None:
    """Replace the file with `data` (mode 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(data, sort_keys=False))
    os.chmod(tmp, 0o600)
    tmp.replace(path)


def add_token(path: Path, token: str, user: str, groups: list[str],
              clusters: list[str] | None = None) -> None:
    """Add (or replace) the entry of `token`."""
    data = read_tokens(path)
    entries = [e for e in data.setdefault("tokens", []) if e.get("token") != token]
    entry: dict[str, Any] = {"token": token, "user": user, "groups": groups}
    if clusters:
        entry["clusters"] = clusters
    entries.append(entry)
    data["tokens"] = entries
    write_tokens(path, data)


def remove_cluster_tokens(path: Path, cluster: str) -> int:
    """Remove every token valid only in logical cluster `cluster`; how many went."""
    if not path.exists():
        return 0
    data = read_tokens(path)
    entries = data.get("tokens") or []
    kept = [e for e in entries if not (isinstance(e, dict)
                                       and list(e.get("clusters") or []) == [cluster])]
    if len(kept) == len(entries):
        return 0
    data["tokens"] = kept
    write_tokens(path, data)
    return len(entries) - len(kept)
