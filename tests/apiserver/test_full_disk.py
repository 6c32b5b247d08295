"""A real full disk: the server process under RLIMIT_FSIZE. A write that cannot be
committed is answered 503 and leaves nothing behind; `/readyz` says so until it can write."""

from __future__ import annotations

import os
import re
import resource
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import yaml

CLI = [sys.executable, "-m", "gpushare.cli.main"]
CM = "/api/v1/namespaces/default/configmaps"
ROOT_CA = "kube-root-ca.crt"  # made in every namespace


def _start(data: Path, fsize: int | None = None) -> tuple[subprocess.Popen[str], httpx.Client]:
    def limit() -> None:
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, resource.RLIM_INFINITY))

    proc = subprocess.Popen([*CLI, "apiserver", "--data-dir", str(data), "--port", "0"],
                            stderr=subprocess.PIPE, text=True, preexec_fn=limit)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    match = re.search(r"listening on (https://\S+);", line)
    assert match, line
    token = yaml.safe_load((data / "tokens.yaml").read_text())["tokens"][0]["token"]
    ctx = ssl.create_default_context(cafile=str(data / "pki" / "ca.crt"))
    client = httpx.Client(base_url=match.group(1), verify=ctx, timeout=10,
                          headers={"Authorization": f"Bearer {token}"})
    deadline = time.monotonic() + 20
    while True:
        try:
            if client.get("/livez").status_code == 200:
                return proc, client
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.05)


def _db_bytes(data: Path) -> int:
    return sum(p.stat().st_size for p in data.glob("state.db*"))


def test_full_disk_leaves_no_phantom_and_flips_readyz(tmp_path: Path) -> None:
    proc, c = _start(tmp_path)  # first start: bootstrap objects, certificates, tokens
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=20)
    c.close()
    # Room for about 1.5 MB more of database and WAL, then the "disk" is full.
    proc, c = _start(tmp_path, fsize=max(p.stat().st_size for p in tmp_path.glob("state.db*"))
                     + 1_500_000)
    try:
        assert c.get("/readyz").status_code == 200
        acked: dict[str, str] = {}
        refused: list[str] = []
        blob = "x" * 100_000
        for i in range(200):
            name = f"cm-{i}"
            r = c.post(CM, json={"metadata": {"name": name}, "data": {"blob": blob}})
            if r.status_code == 201:
                acked[name] = r.json()["metadata"]["resourceVersion"]
                continue
            assert r.status_code == 503, r.text
            assert r.json()["kind"] == "Status"
            refused.append(name)
            if len(refused) >= 3:
                break
        assert refused, f"the disk never filled ({_db_bytes(tmp_path)} bytes)"
        assert len(acked) >= 3
        assert c.get("/readyz").status_code == 503
        assert "store" in c.get("/readyz").text
        assert c.get("/livez").status_code == 200
        for name in refused:  # no phantom: not by GET, not in a list
            assert c.get(f"{CM}/{name}").status_code == 404
        listed = {o["metadata"]["name"] for o in c.get(CM).json()["items"]} - {ROOT_CA}
        assert listed == set(acked)
        # Room again (as after freeing disk space): ready, and writes work.
        resource.prlimit(proc.pid, resource.RLIMIT_FSIZE,
                         (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        assert c.get("/readyz").status_code == 200
        r = c.post(CM, json={"metadata": {"name": refused[0]}, "data": {"v": "retried"}})
        assert r.status_code == 201, r.text
        acked[refused[0]] = r.json()["metadata"]["resourceVersion"]
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        c.close()
    # After a crash, exactly the acknowledged writes are there.
    proc, c = _start(tmp_path)
    try:
        items = c.get(CM).json()["items"]
        assert {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in items
                if o["metadata"]["name"] != ROOT_CA} == acked
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
        c.close()
