"""`gpushare apiserver` as a process, with an HTTP client holding the admin token."""

from __future__ import annotations

import re
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import yaml

CLI = [sys.executable, "-m", "gpushare.cli.main"]


def start(data: Path, *args: str, preexec: Callable[[], None] | None = None
          ) -> tuple[subprocess.Popen[str], httpx.Client]:
    proc = subprocess.Popen([*CLI, "apiserver", "--data-dir", str(data), "--port", "0", *args],
                            stderr=subprocess.PIPE, text=True, preexec_fn=preexec)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    match = re.search(r"listening on (https://\S+);", line)
    if not match:
        proc.wait(20)
        raise AssertionError(f"the server did not start: {line}{proc.stderr.read()}")
    token = yaml.safe_load((data / "tokens.yaml").read_text())["tokens"][0]["token"]
    client = httpx.Client(base_url=match.group(1), verify=ssl.create_default_context(
                              cafile=str(data / "pki" / "ca.crt")),
                          timeout=30, headers={"Authorization": f"Bearer {token}"})
    deadline = time.monotonic() + 30
    while True:
        try:
            if client.get("/livez").status_code == 200:
                return proc, client
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "the server did not answer /livez"
        time.sleep(0.05)


def stop(proc: subprocess.Popen[str], client: httpx.Client) -> None:
    client.close()
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)
