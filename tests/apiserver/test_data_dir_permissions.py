"""The data directory (store, tokens, keys, admin kubeconfig) is readable by its owner only."""

from __future__ import annotations

import stat
from pathlib import Path

from gpushare.cli.compose import api_server


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_data_dir_store_tokens_and_keys_are_owner_only(tmp_path: Path) -> None:
    data = tmp_path / "state"
    data.mkdir(mode=0o755)
    (data / "state.db").touch(mode=0o644)  # as an older version left it
    server = api_server(data, "127.0.0.1", 0).start()
    try:
        with_token = server.tokens
        with_token.add("t-0123456789", "bob", [])
        server.api.store.flush()
    finally:
        server.stop()
    assert _mode(data) == 0o700
    assert _mode(data / "pki") == 0o700
    for name in ("state.db", "tokens.yaml", "admin.kubeconfig", "pki/ca.key",
                 "pki/server.key", "pki/sa.key"):
        assert _mode(data / name) == 0o600, name
    for extra in data.glob("state.db-*"):
        assert _mode(extra) & 0o077 == 0, extra.name


def test_a_fresh_data_dir_is_created_owner_only(tmp_path: Path) -> None:
    data = tmp_path / "new"
    server = api_server(data, "127.0.0.1", 0).start()
    server.stop()
    assert _mode(data) == 0o700 and _mode(data / "state.db") == 0o600
