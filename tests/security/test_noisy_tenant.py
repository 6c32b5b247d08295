"""A tenant that tries to take the shared API server's memory or storage for itself: a
watch that never reads while big objects are written, and big objects past its quota.
`gpushare apiserver` runs as its own process, so its memory is its own."""

from __future__ import annotations

import secrets
import socket
import ssl
import time
from pathlib import Path

import httpx
import psutil
from apiserver_proc import start, stop

from gpushare.apiserver.auth.access import TokenFile

CMS = "/api/v1/namespaces/default/configmaps"
VCS = "/apis/tenancy.gpushare.io/v1alpha1/virtualclusters"
MIB = 1024 * 1024


def _tenant(client: httpx.Client, data: Path, name: str, **spec: object) -> httpx.Client:
    r = client.post(VCS, json={"apiVersion": "tenancy.gpushare.io/v1alpha1",
                               "kind": "VirtualCluster", "metadata": {"name": name},
                               "spec": {"queues": ["default"], **spec}})
    assert r.status_code == 201, r.text
    assert client.get(f"/clusters/{name}/api/v1/namespaces/default").status_code == 200
    rbac = f"/clusters/{name}/apis/rbac.authorization.k8s.io/v1"
    client.post(f"{rbac}/clusterroles", json={
        "metadata": {"name": "everything"},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]})
    assert client.post(f"{rbac}/clusterrolebindings", json={
        "metadata": {"name": "tenant"}, "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
            "name": "everything"},
        "subjects": [{"kind": "User", "name": f"{name}-user"}]}).status_code == 201
    token = secrets.token_urlsafe(24)
    TokenFile(data / "tokens.yaml").add(token, f"{name}-user", [], [name])
    tenant = httpx.Client(base_url=f"{str(client.base_url).rstrip('/')}/clusters/{name}",
                          verify=ssl.create_default_context(cafile=str(data / "pki/ca.crt")),
                          headers={"Authorization": f"Bearer {token}"}, timeout=60)
    for _ in range(100):  # the server re-reads tokens.yaml once it changed
        if tenant.get(f"{CMS}").status_code == 200:
            return tenant
        time.sleep(0.1)
    raise AssertionError("the tenant's token was not accepted")


def _rss(pid: int) -> int:
    return int(psutil.Process(pid).memory_info().rss)


def test_a_watch_that_never_reads_cannot_grow_the_server(tmp_path: Path) -> None:
    data = tmp_path / "data"
    proc, client = start(data, "--watch-backlog-bytes", str(4 * MIB),
                         "--event-log-bytes", str(8 * MIB))
    try:
        tenant = _tenant(client, data, "greedy")
        assert tenant.post(CMS, json={"metadata": {"name": "big"}, "data": {}}
                           ).status_code == 201
        host, port = str(client.base_url.host), int(client.base_url.port or 443)
        raw = socket.create_connection((host, port))
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock = ssl.create_default_context(cafile=str(data / "pki/ca.crt")).wrap_socket(
            raw, server_hostname=host)
        token = tenant.headers["Authorization"]
        sock.sendall(f"GET /clusters/greedy{CMS}?watch=true HTTP/1.1\r\nHost: {host}\r\n"
                     f"Authorization: {token}\r\n\r\n".encode())
        writes, size = 100, 2 * 1000 * 1000
        baseline = 0
        for i in range(writes):
            r = tenant.put(f"{CMS}/big", json={"metadata": {"name": "big"},
                                                "data": {"v": str(i % 10) * size}})
            assert r.status_code == 200, r.text
            if i == 9:  # past the first allocations of a 2 MB write
                baseline = _rss(proc.pid)
        grown = _rss(proc.pid) - baseline
        metrics = client.get("/metrics").text
        sock.close()
        # 90 writes of 2 MB waited for that watch: it was closed and they were not kept
        assert 'apiserver_terminated_watchers_total{resource="configmaps"} 1.0' in metrics
        assert "apiserver_watches 0.0" in metrics
        assert grown < 90 * size // 2, f"the server grew by {grown / MIB:.0f} MiB"
    finally:
        stop(proc, client)


def test_big_objects_past_the_tenants_byte_quota_are_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    proc, client = start(data)
    try:
        tenant = _tenant(client, data, "hoarder", maxStorageBytes="20Mi")
        accepted = refused = 0
        for i in range(20):  # 20 x 2.5 MB: the quota holds about 8
            r = tenant.post(CMS, json={"metadata": {"name": f"big{i}"},
                                       "data": {"v": "x" * 2_500_000}})
            if r.status_code == 201:
                accepted += 1
            else:
                assert r.status_code == 403, r.text
                assert "spec.maxStorageBytes" in r.json()["message"]
                refused += 1
        assert 0 < accepted <= 8 and refused == 20 - accepted
        # the platform sees what the tenant holds, and that is under the quota
        metrics = client.get("/metrics").text
        line = next(li for li in metrics.splitlines()
                    if li.startswith('apiserver_tenant_bytes{cluster="hoarder"}'))
        assert float(line.split()[-1]) <= 20 * MIB
    finally:
        stop(proc, client)
