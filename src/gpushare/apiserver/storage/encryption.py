"""Encryption at rest of stored objects, configured as kube-apiserver's EncryptionConfiguration.

`D/encryption-config.yaml` (made 0600 on first start, with one fresh AES-GCM key):

    apiVersion: apiserver.config.k8s.io/v1
    kind: EncryptionConfiguration
    resources:
    - resources: [secrets]
      providers:
      - aesgcm: {keys: [{name: key1, secret: <base64 of 32 random bytes>}]}
      - identity: {}

The first provider of a resource writes; every provider reads. A stored value written by
`aesgcm` is `k8s:enc:aesgcm:v1:<key name>:` + 12-byte nonce + ciphertext, with the object's
storage key as associated data (a row moved elsewhere does not decrypt). Rows written by an
older provider (plain text from before encryption, or an older key) stay readable and are
rewritten with the first provider when the server starts: rotation is "put the new key
first, restart, then drop the old key".
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

CONFIG_NAME = "encryption-config.yaml"
PREFIX = b"k8s:enc:aesgcm:v1:"
DEFAULT_RESOURCES = ("secrets",)


class EncryptionError(RuntimeError):
    pass


@dataclass(frozen=True)
class _Rule:
    write: tuple[str, str] | None  # ("aesgcm", key name) or None for identity
    keys: dict[str, AESGCM]


def default_config() -> dict[str, Any]:
    secret = base64.b64encode(os.urandom(32)).decode()
    return {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "EncryptionConfiguration",
            "resources": [{"resources": list(DEFAULT_RESOURCES), "providers": [
                {"aesgcm": {"keys": [{"name": "key1", "secret": secret}]}},
                {"identity": {}}]}]}


def _aad(cluster: str, gr: str, ns: str, name: str) -> bytes:
    return f"/{cluster}/{gr}/{ns}/{name}".encode()


class Transformer:
    """Encodes rows of the configured resources for storage and decodes them back."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.rules: dict[str, _Rule] = {}
        for i, entry in enumerate(config.get("resources") or ()):
            if not isinstance(entry, dict):
                raise EncryptionError(f"resources[{i}]: must be a mapping")
            write: tuple[str, str] | None = None
            keys: dict[str, AESGCM] = {}
            for j, provider in enumerate(entry.get("providers") or ()):
                where = f"resources[{i}].providers[{j}]"
                if not isinstance(provider, dict) or len(provider) != 1:
                    raise EncryptionError(f"{where}: must name one provider")
                kind, body = next(iter(provider.items()))
                if kind == "identity":
                    if j == 0:
                        write = None
                    continue
                if kind != "aesgcm":
                    raise EncryptionError(f"{where}: unsupported provider {kind!r} "
                                          "(supported: aesgcm, identity)")
                for k, key in enumerate((body or {}).get("keys") or ()):
                    try:
                        raw = base64.b64decode(str(key["secret"]), validate=True)
                        aes = AESGCM(raw)
                    except Exception as e:
                        raise EncryptionError(f"{where}.aesgcm.keys[{k}]: {e}") from e
                    name = str(key.get("name") or "")
                    if not name or ":" in name:
                        raise EncryptionError(f"{where}.aesgcm.keys[{k}].name: required, "
                                              "without ':'")
                    keys[name] = aes
                    if j == 0 and k == 0:
                        write = ("aesgcm", name)
            for resource in entry.get("resources") or ():
                self.rules[_group_resource(str(resource))] = _Rule(write, keys)

    @classmethod
    def for_data_dir(cls, data_dir: Path) -> Transformer:
        path = data_dir / CONFIG_NAME
        if not path.exists():
            tmp = path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(yaml.safe_dump(default_config(), sort_keys=False))
            tmp.replace(path)
        path.chmod(0o600)
        try:
            config = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as e:
            raise EncryptionError(f"{path}: {e}") from e
        if not isinstance(config, dict):
            raise EncryptionError(f"{path}: must be an EncryptionConfiguration mapping")
        return cls(config)

    def encode(self, cluster: str, gr: str, ns: str, name: str, data: bytes) -> bytes:
        rule = self.rules.get(gr)
        if rule is None or rule.write is None:
            return data
        key_name = rule.write[1]
        nonce = os.urandom(12)
        sealed = rule.keys[key_name].encrypt(nonce, data, _aad(cluster, gr, ns, name))
        return PREFIX + key_name.encode() + b":" + nonce + sealed

    def decode(self, cluster: str, gr: str, ns: str, name: str, data: bytes) -> bytes:
        if not data.startswith(PREFIX):
            return data  # identity (or written before encryption was configured)
        rule = self.rules.get(gr)
        key_name, _, rest = data[len(PREFIX):].partition(b":")
        aes = rule.keys.get(key_name.decode()) if rule is not None else None
        if aes is None:
            raise EncryptionError(f"no key {key_name.decode()!r} for {gr} in the encryption "
                                  "configuration")
        return aes.decrypt(rest[:12], rest[12:], _aad(cluster, gr, ns, name))

    def stale(self, gr: str, data: bytes) -> bool:
        """Whether a stored row is not in the form the first provider writes."""
        rule = self.rules.get(gr)
        if rule is None or rule.write is None:
            return data.startswith(PREFIX)
        return not data.startswith(PREFIX + rule.write[1].encode() + b":")


def _group_resource(resource: str) -> str:
    """`secrets` → `secrets`; `widgets.example.com` → `example.com/widgets`."""
    plural, _, group = resource.partition(".")
    return f"{group}/{plural}" if group else plural
