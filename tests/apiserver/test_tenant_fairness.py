"""Per-tenant fairness: one tenant's bulk work does not stall another's requests; a watch
that falls behind is closed; the fair queue's turns."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from apiserver_harness import http_client
from tenants import configmap, make_tenant, tenant_client

from gpushare.apiserver.auth.access import User
from gpushare.apiserver.errors import ApiError
from gpushare.apiserver.http.flowcontrol import (
    SYSTEM,
    WORKLOAD,
    FlowControl,
    FlowControlConfig,
    LevelConfig,
    classify,
)
from gpushare.apiserver.http.server import ApiServer
from gpushare.cli.compose import api_server

CMS = "/api/v1/namespaces/default/configmaps"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    data: Path = tmp_path_factory.mktemp("fair")
    s = api_server(data, "127.0.0.1", 0, sync="normal", watch_backlog_bytes=1024 * 1024)
    s.start()
    try:
        yield s
    finally:
        s.stop()


def test_another_tenant_is_served_while_a_deletecollection_runs(server: ApiServer) -> None:
    token_a, token_b = make_tenant(server, "storm"), make_tenant(server, "quiet")
    with http_client(server, cluster="storm") as admin:  # 3000 objects to delete
        for i in range(3000):
            assert admin.post(CMS, json=configmap(f"cm{i:05}")).status_code == 201
    with tenant_client(server, "quiet", token_b) as quiet:
        assert quiet.post(CMS, json=configmap("mine")).status_code == 201
    left_when_served: list[int] = []
    deleted: list[httpx.Response] = []

    def storm() -> None:
        with tenant_client(server, "storm", token_a) as tenant:
            deleted.append(tenant.delete(CMS, timeout=300))

    total = server.store.count("storm", "configmaps", "default")  # and kube-root-ca.crt
    thread = threading.Thread(target=storm)
    thread.start()
    while server.store.count("storm", "configmaps", "default") >= total:
        pass  # until the deletion has begun
    with tenant_client(server, "quiet", token_b) as quiet:
        r = quiet.get(f"{CMS}/mine")
        left_when_served.append(server.store.count("storm", "configmaps", "default"))
    thread.join()
    assert r.status_code == 200
    assert deleted[0].status_code == 200 and len(deleted[0].json()["items"]) >= total
    # the other tenant's GET was answered while the storm's objects were still going
    assert left_when_served[0] > 0
    assert not [o for o in server.store.list("storm", "configmaps", "default")
                if o["metadata"]["name"].startswith("cm")]


def _raw_watch(server: ApiServer, path: str) -> ssl.SSLSocket:
    """A watch whose client reads nothing (a tiny receive buffer, never drained)."""
    assert server.ca_path is not None
    context = ssl.create_default_context(cafile=str(server.ca_path))
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.connect((server.host, server.port))
    sock = context.wrap_socket(raw, server_hostname=server.host)
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {server.host}\r\n"
                 f"Authorization: Bearer {server.admin_token}\r\nConnection: close\r\n\r\n"
                 .encode())
    return sock


def test_a_watch_that_never_reads_is_closed_and_its_backlog_freed(server: ApiServer) -> None:
    with http_client(server) as admin:
        assert admin.post(CMS, json=configmap("big", 10)).status_code == 201
        rv = admin.get(f"{CMS}/big").json()["metadata"]["resourceVersion"]
        sock = _raw_watch(server, f"{CMS}?watch=true&resourceVersion={rv}"
                                  "&fieldSelector=metadata.name%3Dbig")
        hub = server.app.hub
        for _ in range(200):  # wait for the watch to be registered
            if hub.count:
                break
            admin.get("/api/v1/namespaces/default")
        assert hub.count == 1
        writes = 40
        for i in range(writes):  # 40 x 512 KB: far past the 1 MiB backlog bound
            cm = admin.get(f"{CMS}/big").json()
            cm["data"] = {"blob": str(i) * 512 * 1024}
            assert admin.put(f"{CMS}/big", json=cm).status_code == 200
        assert hub.count == 0  # closed by the server, with nothing kept for it
        assert hub.terminated.get("configmaps") == 1
        text = admin.get("/metrics").text
        assert 'apiserver_terminated_watchers_total{resource="configmaps"} 1.0' in text
    # the client, reading at last, finds the stream ended short of the writes
    sock.settimeout(30)
    received = b""
    while True:
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        received += chunk
    sock.close()
    assert received.startswith(b"HTTP/1.1 200")
    assert 0 < received.count(b'"type":"MODIFIED"') < writes
    assert received.endswith(b"0\r\n\r\n")  # the chunked body's end: closed, not cut


def test_classification_puts_the_platform_apart_from_tenants() -> None:
    assert classify(User("admin", ("system:masters",)), "t1") == (SYSTEM, "admin")
    assert classify(User("system:node:n1", ("system:nodes",)), "root")[0] == SYSTEM
    assert classify(User("system:gpushare-controllers", ()), "root")[0] == SYSTEM
    assert classify(User("alice", ("team",), ("t1",)), "t1") == (WORKLOAD, "t1")
    assert classify(User("bob", ()), "t2") == (WORKLOAD, "t2")


def test_a_freed_seat_goes_to_the_next_flow_not_the_busiest() -> None:
    config = FlowControlConfig(workload=LevelConfig(seats=1, per_flow=1, queue_length=50))
    flow = FlowControl(config)
    order: list[str] = []

    async def request(user: User, cluster: str, hold: asyncio.Event | None = None) -> None:
        async with flow.seat(user, cluster):
            order.append(cluster)
            if hold is not None:
                await hold.wait()

    async def run() -> None:
        hold = asyncio.Event()
        first = asyncio.create_task(request(User("a", ()), "a", hold))
        await asyncio.sleep(0)
        noisy = [asyncio.create_task(request(User("a", ()), "a")) for _ in range(10)]
        await asyncio.sleep(0)
        quiet = asyncio.create_task(request(User("b", ()), "b"))
        await asyncio.sleep(0)
        assert flow.levels[WORKLOAD].waiting == 11
        # the platform's level is apart: it runs at once while tenants wait
        await request(User("admin", ("system:masters",)), "a")
        hold.set()
        await asyncio.gather(first, quiet, *noisy)

    asyncio.run(run())
    # the held request, the platform's, then a's and b's turns alternate: b, queued behind
    # ten of a's requests, is served second of them, not eleventh
    assert order.index("b") == 3
    assert order.count("a") == 12 and flow.levels[WORKLOAD].executing == 0


def test_a_full_queue_is_answered_429() -> None:
    config = FlowControlConfig(workload=LevelConfig(seats=1, per_flow=1, queue_length=1))
    flow = FlowControl(config)
    codes: list[Any] = []

    async def request(hold: asyncio.Event | None = None) -> None:
        try:
            async with flow.seat(User("a", ()), "a"):
                if hold is not None:
                    await hold.wait()
        except ApiError as e:
            codes.append((e.code, e.message))

    async def run() -> None:
        hold = asyncio.Event()
        tasks = [asyncio.create_task(request(hold))]
        await asyncio.sleep(0)
        tasks += [asyncio.create_task(request()) for _ in range(2)]
        await asyncio.sleep(0)
        hold.set()
        await asyncio.gather(*tasks)

    asyncio.run(run())
    assert len(codes) == 1 and codes[0][0] == 429 and "queue is full" in codes[0][1]
