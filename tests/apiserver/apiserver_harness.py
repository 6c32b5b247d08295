"""Shared helpers of the API server tests: a kubectl runner and an official client."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config

from gpushare.apiserver.http.server import ApiServer
from gpushare.tools import find_tool

KUBECTL = find_tool("kubectl") or "kubectl"  # the environment's kubectl wheel, else PATH


@dataclass
class Cluster:
    server: ApiServer
    kubeconfig: Path
    cache_dir: Path

    def kubectl(self, *args: str, check: bool = True, stdin: str | None = None,
                kubeconfig: Path | None = None,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        cmd = [KUBECTL, "--kubeconfig", str(kubeconfig or self.kubeconfig),
               "--cache-dir", str(self.cache_dir), *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, input=stdin, timeout=60,
                              env={**os.environ, "HOME": str(self.cache_dir), **(env or {})})
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed:\n{proc.stdout}\n"
                                 f"{proc.stderr}")
        return proc

    def api_client(self, kubeconfig: Path | None = None) -> client.ApiClient:
        return config.new_client_from_config(str(kubeconfig or self.kubeconfig))


def http_client(server: ApiServer, token: str | None = None, cluster: str = "root") -> Any:
    """An httpx client for raw API requests (status codes, headers, streaming)."""
    import ssl

    import httpx

    headers = {"Authorization": f"Bearer {token or server.admin_token}"}
    return httpx.Client(base_url=server.cluster_url(cluster), headers=headers,
                        verify=ssl.create_default_context(cafile=str(server.ca_path)),
                        timeout=30)
