"""Secrets are encrypted at rest (AES-GCM, EncryptionConfiguration-style key file); plain
rows from before stay readable and are rewritten encrypted; keys rotate by name."""

from __future__ import annotations

import base64
import os
import sqlite3
from pathlib import Path

import yaml
from apiserver_harness import http_client

from gpushare.apiserver.http.server import ApiServer
from gpushare.apiserver.storage.encryption import CONFIG_NAME, PREFIX
from gpushare.cli.compose import api_server

SECRET = "hunter2-very-secret"


def _rows(data: Path) -> dict[str, bytes]:
    db = sqlite3.connect(data / "state.db")
    try:
        return {name: bytes(blob) for name, blob in db.execute(
            "SELECT name, data FROM objects WHERE gr='secrets'")}
    finally:
        db.close()


def _put_secret(server: ApiServer, name: str) -> None:
    with http_client(server) as c:
        r = c.post("/api/v1/namespaces/default/secrets",
                   json={"metadata": {"name": name}, "data": {
                       "password": base64.b64encode(SECRET.encode()).decode()}})
        assert r.status_code == 201, r.text


def _read_secret(server: ApiServer, name: str) -> str:
    with http_client(server) as c:
        r = c.get(f"/api/v1/namespaces/default/secrets/{name}")
        assert r.status_code == 200, r.text
        return base64.b64decode(r.json()["data"]["password"]).decode()


def test_secrets_are_encrypted_at_rest_and_keys_rotate(tmp_path: Path) -> None:
    data = tmp_path / "state"
    server = api_server(data, "127.0.0.1", 0).start()
    try:
        _put_secret(server, "db")
        with http_client(server) as c:  # other kinds stay plain
            c.post("/api/v1/namespaces/default/configmaps", json={"metadata": {"name": "cm"}})
    finally:
        server.stop()
    assert (os.stat(data / CONFIG_NAME).st_mode & 0o077) == 0
    raw = _rows(data)["db"]
    assert raw.startswith(PREFIX + b"key1:")
    assert SECRET.encode() not in raw and base64.b64encode(SECRET.encode()) not in raw

    # A plain row, as written before encryption existed, and a key rotation.
    db = sqlite3.connect(data / "state.db")
    plain = (b'{"apiVersion":"v1","kind":"Secret","metadata":{"name":"old","namespace":'
             b'"default","uid":"u-old","resourceVersion":"1"},"data":{"password":"'
             + base64.b64encode(SECRET.encode()) + b'"}}')
    db.execute("INSERT INTO objects VALUES ('root','secrets','default','old',1,?)", (plain,))
    db.commit()
    db.close()
    config = yaml.safe_load((data / CONFIG_NAME).read_text())
    providers = config["resources"][0]["providers"]
    providers[0]["aesgcm"]["keys"].insert(
        0, {"name": "key2", "secret": base64.b64encode(os.urandom(32)).decode()})
    (data / CONFIG_NAME).write_text(yaml.safe_dump(config))

    server = api_server(data, "127.0.0.1", 0).start()
    try:
        assert _read_secret(server, "db") == SECRET
        assert _read_secret(server, "old") == SECRET
    finally:
        server.stop()
    rows = _rows(data)
    assert all(v.startswith(PREFIX + b"key2:") for v in rows.values()), rows.keys()
    assert all(SECRET.encode() not in v for v in rows.values())

    # Once everything is under key2, key1 can go.
    providers[0]["aesgcm"]["keys"] = providers[0]["aesgcm"]["keys"][:1]
    (data / CONFIG_NAME).write_text(yaml.safe_dump(config))
    server = api_server(data, "127.0.0.1", 0).start()
    try:
        assert _read_secret(server, "db") == SECRET
    finally:
        server.stop()
