"""The server as a process: `gpushare apiserver`, crash safety, `gpushare kubeconfig`."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml
from apiserver_harness import KUBECTL

CLI = [sys.executable, "-m", "gpushare.cli.main"]


class ServerProcess:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.proc = subprocess.Popen([*CLI, "apiserver", "--data-dir", str(data_dir),
                                      "--port", "0"], stderr=subprocess.PIPE, text=True)
        assert self.proc.stderr is not None
        line = self.proc.stderr.readline()
        match = re.search(r"listening on (https://\S+);", line)
        assert match, line
        self.url = match.group(1)
        token = yaml.safe_load((data_dir / "tokens.yaml").read_text())["tokens"][0]["token"]
        import ssl
        ctx = ssl.create_default_context(cafile=str(data_dir / "pki" / "ca.crt"))
        self.http = httpx.Client(base_url=self.url, verify=ctx, timeout=10,
                                 headers={"Authorization": f"Bearer {token}"})
        deadline = time.monotonic() + 20
        while True:
            try:
                if self.http.get("/readyz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "server did not become ready"
            time.sleep(0.05)


def test_acknowledged_writes_survive_kill_9(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path)
    acked: dict[str, int] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def burst(worker: int) -> None:
        import ssl
        ctx = ssl.create_default_context(cafile=str(tmp_path / "pki" / "ca.crt"))
        with httpx.Client(base_url=server.url, verify=ctx, timeout=5,
                          headers=server.http.headers) as c:
            i = 0
            while not stop.is_set():
                name = f"burst-{worker}-{i}"
                i += 1
                try:
                    r = c.post("/api/v1/namespaces/default/configmaps",
                               json={"metadata": {"name": name}, "data": {"i": str(i)}})
                except httpx.HTTPError:
                    return
                if 200 <= r.status_code < 300:
                    with lock:
                        acked[name] = int(r.json()["metadata"]["resourceVersion"])

    threads = [threading.Thread(target=burst, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    while len(acked) < 300 and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(server.proc.pid, signal.SIGKILL)  # mid-burst
    server.proc.wait()
    stop.set()
    for t in threads:
        t.join()
    assert len(acked) >= 300

    restarted = ServerProcess(tmp_path)
    try:
        items = restarted.http.get("/api/v1/namespaces/default/configmaps").json()["items"]
        stored = {o["metadata"]["name"]: int(o["metadata"]["resourceVersion"]) for o in items}
        missing = set(acked) - set(stored)
        assert not missing, f"{len(missing)} acknowledged writes lost"
        assert all(stored[n] == rv for n, rv in acked.items())
        after = restarted.http.post("/api/v1/namespaces/default/configmaps",
                                    json={"metadata": {"name": "after-crash"}})
        assert int(after.json()["metadata"]["resourceVersion"]) > max(stored.values())
    finally:
        restarted.proc.send_signal(signal.SIGINT)
        assert restarted.proc.wait(timeout=20) == 0  # Ctrl-C is a clean shutdown


def test_resource_versions_keep_increasing_after_deletes_and_restart(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path)
    r = server.http.post("/api/v1/namespaces/default/configmaps",
                         json={"metadata": {"name": "last"}})
    server.http.delete("/api/v1/namespaces/default/configmaps/last")
    rv_after_delete = int(server.http.get("/api/v1/namespaces/default/configmaps").json()[
        "metadata"]["resourceVersion"])
    assert rv_after_delete > int(r.json()["metadata"]["resourceVersion"])
    server.proc.send_signal(signal.SIGINT)
    assert server.proc.wait(timeout=20) == 0
    again = ServerProcess(tmp_path)
    try:
        created = again.http.post("/api/v1/namespaces/default/configmaps",
                                  json={"metadata": {"name": "next"}}).json()
        assert int(created["metadata"]["resourceVersion"]) > rv_after_delete
        # A watch from before the restart can no longer be served.
        with again.http.stream("GET", "/api/v1/namespaces/default/configmaps",
                               params={"watch": "true", "resourceVersion": "1"}) as w:
            first = next(w.iter_lines())
        assert '"code":410' in first
    finally:
        again.proc.send_signal(signal.SIGINT)
        again.proc.wait(timeout=20)


def test_kubeconfig_command_issues_user_tokens(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path)
    try:
        out = tmp_path / "carol.kubeconfig"
        subprocess.run([*CLI, "kubeconfig", "--data-dir", str(tmp_path), "--user", "carol",
                        "--output", str(out)], check=True)
        cfg = yaml.safe_load(out.read_text())
        assert cfg["users"][0]["name"] == "carol"
        assert cfg["clusters"][0]["cluster"]["server"] == server.url
        env = {**os.environ, "HOME": str(tmp_path)}
        denied = subprocess.run([KUBECTL, "--kubeconfig", str(out), "get", "pods"],
                                capture_output=True, text=True, env=env)
        assert denied.returncode != 0
        assert 'User "carol" cannot list resource "pods"' in denied.stderr
        admin = subprocess.run([*CLI, "kubeconfig", "--data-dir", str(tmp_path)],
                               capture_output=True, text=True, check=True).stdout
        assert yaml.safe_load(admin)["users"][0]["name"] == "admin"
        ok = subprocess.run([KUBECTL, "--kubeconfig", str(tmp_path / "admin.kubeconfig"),
                             "get", "ns", "default", "-o", "name"], capture_output=True,
                            text=True, env=env)
        assert ok.stdout.strip() == "namespace/default"
    finally:
        server.proc.send_signal(signal.SIGINT)
        server.proc.wait(timeout=20)


def test_one_server_per_data_directory(tmp_path: Path) -> None:
    from gpushare.cli.compose import api_server

    first = api_server(tmp_path, port=0)
    try:
        with pytest.raises(RuntimeError, match="another API server"):
            api_server(tmp_path, port=0)
    finally:
        first.stop()
    api_server(tmp_path, port=0).stop()  # free again once the first one stopped


def test_events_expire(tmp_path: Path) -> None:
    from apiserver_harness import http_client

    from gpushare.cli.compose import api_server

    server = api_server(tmp_path, port=0, event_ttl=1.0).start()
    try:
        with http_client(server) as http:
            path = "/api/v1/namespaces/default/events"
            r = http.post(path, json={"metadata": {"name": "old"}, "reason": "X",
                                      "involvedObject": {"kind": "Pod", "name": "p"}})
            assert r.status_code == 201
            deadline = time.monotonic() + 10
            while http.get(f"{path}/old").status_code == 200:
                assert time.monotonic() < deadline, "the event did not expire"
                time.sleep(0.1)
    finally:
        server.stop()
