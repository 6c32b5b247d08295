"""The agent's node endpoint on its own: real TLS with certificates from the product's CA,
a real pod process under a supervisor, real HTTP and WebSocket clients. Who gets in (the
API server's client certificate; nobody without credentials or with a foreign
certificate), logs and follows, exec's channel protocol, and SPDY framing."""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import json
import socket
import ssl
import struct
from pathlib import Path
from urllib.parse import urlencode

import pytest
from cryptography import x509
from test_agent_runtime import pod, supervise, wait_for
from websockets.asyncio.client import connect

from gpushare.agent.endpoint.nodeserver import NodeHandlers, NodeServer
from gpushare.agent.endpoint.spdy import (
    FLAG_FIN,
    SPDY_DICTIONARY,
    SYN_STREAM,
    HeaderCodec,
    control_frame,
    data_frame,
    parse_frames,
)
from gpushare.agent.endpoint.streams import ExecTarget
from gpushare.agent.node.nodeauth import CallerCheck
from gpushare.agent.runtime.logstore import log_path
from gpushare.api.contracts import NODE_CLIENT_NAME
from gpushare.apiserver.auth.tls import NODE_CA_CERT, NODE_CLIENT_CERT, NODE_CLIENT_KEY
from node_pki import client_cert, node_tls


@pytest.fixture
def node(tmp_path: Path):
    """A node server for pod t/p (container c, a shell printing three lines), the CA dir,
    and the pod's supervisor."""
    pki = tmp_path / "pki"
    tls = node_tls(pki, tmp_path / "node")
    directory = tmp_path / "pod"
    directory.mkdir()
    script = "echo start; sleep 0.6; echo middle; sleep 0.3; echo end; sleep 30"
    sup, _ = supervise(pod("p", [{"name": "c", "command": ["sh", "-c", script]}], "Never"),
                       directory)

    def target(ns: str, name: str, container: str, command: list[str]) -> ExecTarget:
        plan = sup.exec_plan(container)
        if (ns, name) != ("t", "p") or plan is None:
            raise LookupError(f'container "{container}" is not running')
        return ExecTarget(command, {**plan.env, "FROM_POD": "yes"}, directory)

    handlers = NodeHandlers(
        lambda ns, name: directory if (ns, name) == ("t", "p") else None,
        lambda ns, name, c: sup.container_running(c), target)
    # no token reaches this server, so the caller check never asks an API
    server = NodeServer(handlers, tls, CallerCheck(None, "n").check)  # type: ignore[arg-type]
    server.start()
    # the run's process, not only its log file (made just before it starts)
    wait_for(lambda: log_path(directory, "c", 0).exists() and sup.container_groups())
    try:
        yield server, pki, tls, directory
    finally:
        server.stop()
        sup.stop(0)


def _api_client(pki: Path) -> tuple[Path, Path]:
    return pki / NODE_CLIENT_CERT, pki / NODE_CLIENT_KEY


def _context(ca: Path, cert: tuple[Path, Path] | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        context.load_cert_chain(str(cert[0]), str(cert[1]))
    return context


def _get(port: int, context: ssl.SSLContext, path: str,
         headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=15)
    try:
        conn.request("GET", path, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_the_api_servers_certificate_reads_and_follows_logs(node) -> None:
    server, pki, _tls, _ = node
    apiserver = _context(pki / NODE_CA_CERT, _api_client(pki))
    # the container goes on running: the follow ends at its byte limit
    code, body = _get(server.port, apiserver, "/containerLogs/t/p/c?follow=true&limitBytes=17")
    assert (code, body) == (200, b"start\nmiddle\nend\n")
    assert _get(server.port, apiserver, "/containerLogs/t/p/c?tailLines=1") == (200, b"end\n")
    assert _get(server.port, apiserver, "/containerLogs/t/q/c")[0] == 404
    assert _get(server.port, apiserver, "/healthz") == (200, b"ok")


def test_callers_without_credentials_or_with_foreign_certificates_are_refused(
        node, tmp_path: Path) -> None:
    server, pki, _tls, _ = node
    path = "/containerLogs/t/p/c"
    # (a certificate of the cluster CA with another name is a user for a SubjectAccessReview:
    # tests/e2e/test_kubectl_streams.py, with a real API)
    code, body = _get(server.port, _context(pki / NODE_CA_CERT, None), path)
    assert code == 401 and b"start" not in body
    assert _get(server.port, _context(pki / NODE_CA_CERT, None), path,
                {"Authorization": "Bearer "})[0] == 401
    # the API server's name, signed by a CA of its own: the handshake fails
    forged = client_cert(tmp_path / "forged", NODE_CLIENT_NAME, None)
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _get(server.port, _context(pki / NODE_CA_CERT, forged), path)
    # and the real one gets in, so the refusals above are about the credentials
    assert _get(server.port, _context(pki / NODE_CA_CERT, _api_client(pki)),
                path)[0] == 200


def test_plain_http_is_not_served(node) -> None:
    server, _, _, _ = node
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
        conn.request("GET", "/containerLogs/t/p/c")
        conn.getresponse().read()
    conn.close()


async def _exec(port: int, context: ssl.SSLContext, query: str,
                stdin: bytes | None) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    async with connect(f"wss://127.0.0.1:{port}/exec/t/p/c?{query}", ssl=context,
                       subprotocols=["v5.channel.k8s.io"], proxy=None) as ws:  # type: ignore[list-item]
        assert ws.subprotocol == "v5.channel.k8s.io"
        if stdin is not None:
            await ws.send(b"\x00" + stdin)
            await ws.send(b"\xff\x00")  # v5: stdin is done
        async for message in ws:
            assert isinstance(message, bytes)
            out[message[0]] = out.get(message[0], b"") + message[1:]
    return out


def test_exec_runs_in_the_pods_environment_and_reports_the_exit_code(node) -> None:
    server, pki, _tls, _ = node
    apiserver = _context(pki / NODE_CA_CERT, _api_client(pki))
    script = "echo out $FROM_POD; echo err >&2; pwd; exit 7"
    query = urlencode([("command", "sh"), ("command", "-c"), ("command", script),
                       ("stdout", "1"), ("stderr", "1")])
    out = asyncio.run(_exec(server.port, apiserver, query, None))
    lines = out[1].decode().splitlines()
    assert lines == ["out yes", str(server_pod_dir(node))]
    assert out[2] == b"err\n"
    status = json.loads(out[3])
    assert status["reason"] == "NonZeroExitCode"
    assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "7"}]
    piped = asyncio.run(_exec(server.port, apiserver,
                              "command=cat&stdin=1&stdout=1&stderr=1", b"through stdin\n"))
    assert piped[1] == b"through stdin\n"
    assert json.loads(piped[3])["status"] == "Success"


def server_pod_dir(node) -> Path:
    return node[3]


def test_spdy_dictionary_and_header_blocks() -> None:
    # SPDY/3's published dictionary: 1423 bytes with this digest
    assert len(SPDY_DICTIONARY) == 1423
    assert hashlib.sha256(SPDY_DICTIONARY).hexdigest() == \
        "51d27341373f923f3cd88e1eb7162aeaa3723d7585ff2399201dc06498407f02"
    client, server = HeaderCodec(), HeaderCodec()
    headers = {"streamtype": "data", "port": "8080", "requestid": "0"}
    block = client.encode(headers)
    frame = control_frame(SYN_STREAM, 0, struct.pack(">IIH", 3, 0, 0) + block)
    buffer = bytearray(frame + data_frame(3, b"payload", fin=True) + b"\x80")
    frames = parse_frames(buffer)
    assert buffer == bytearray(b"\x80")  # an incomplete frame stays for later
    assert [f.control for f in frames] == [True, False]
    assert frames[0].stream == 3 and server.decode(frames[0].payload[10:]) == headers
    assert (frames[1].stream, frames[1].payload, frames[1].flags) == (3, b"payload", 1)
    # the zlib stream goes on across frames
    assert server.decode(client.encode({"port": "9"})) == {"port": "9"}


def test_many_open_follows_do_not_block_new_requests(node) -> None:
    server, pki, _tls, _ = node
    apiserver = _context(pki / NODE_CA_CERT, _api_client(pki))
    # once the log has its last line, each follow waits (holding a thread) for more
    wait_for(lambda: _get(server.port, apiserver, "/containerLogs/t/p/c?tailLines=1")[1]
             == b"end\n")
    follows = []
    for _ in range(12):  # more than a default thread pool holds on a small machine
        conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=apiserver,
                                           timeout=15)
        conn.request("GET", "/containerLogs/t/p/c?follow=true")
        response = conn.getresponse()
        assert response.status == 200
        assert response.read1(64).startswith(b"start")  # the follow is going
        follows.append(conn)
    try:
        assert _get(server.port, apiserver, "/healthz") == (200, b"ok")
        code, body = _get(server.port, apiserver, "/containerLogs/t/p/c?tailLines=1")
        assert code == 200 and body
    finally:
        for conn in follows:
            conn.close()


def test_a_renewed_certificate_is_served_to_new_connections(node, tmp_path: Path) -> None:
    server, pki, _tls, _ = node

    def served_serial() -> int:
        context = _context(pki / NODE_CA_CERT, _api_client(pki))
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw, \
                context.wrap_socket(raw, server_hostname="127.0.0.1") as wrapped:
            der = wrapped.getpeercert(binary_form=True)
        assert der is not None
        return x509.load_der_x509_certificate(der).serial_number

    before = served_serial()
    renewed = node_tls(pki, tmp_path / "renewed")
    server.reload(renewed)
    after = served_serial()
    assert after != before
    assert after == x509.load_pem_x509_certificate(renewed.cert.read_bytes()).serial_number


async def _spdy_exec(port: int, context: ssl.SSLContext, query: str,
                     stdin: bytes) -> dict[str, bytes]:
    """What a kube-apiserver does for exec: a SPDY/3.1 upgrade and one stream per channel."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context,
                                                   server_hostname="127.0.0.1")
    writer.write(f"POST /exec/t/p/c?{query} HTTP/1.1\r\nHost: node\r\n"
                 "Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
                 "X-Stream-Protocol-Version: v4.channel.k8s.io\r\n"
                 "Content-Length: 0\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101") and b"v4.channel.k8s.io" in head, head
    codec = HeaderCodec()
    streams = {1: "error", 3: "stdin", 5: "stdout", 7: "stderr"}
    for stream, kind in streams.items():
        writer.write(control_frame(SYN_STREAM, 0, struct.pack(">IIH", stream, 0, 0) +
                                   codec.encode({"streamtype": kind})))
    writer.write(data_frame(3, stdin, fin=True))
    await writer.drain()
    got: dict[str, bytes] = {kind: b"" for kind in streams.values()}
    ended: set[str] = set()
    buffer = bytearray()
    while not {"error", "stdout", "stderr"} <= ended:
        data = await asyncio.wait_for(reader.read(65536), 15)
        if not data:
            break
        buffer += data
        for frame in parse_frames(buffer):
            if not frame.control:
                got[streams[frame.stream]] += frame.payload
                if frame.flags & FLAG_FIN:
                    ended.add(streams[frame.stream])
    writer.close()
    return got


def test_exec_over_a_spdy_upgrade_as_a_kube_apiserver_asks(node) -> None:
    server, pki, _tls, _ = node
    apiserver = _context(pki / NODE_CA_CERT, _api_client(pki))
    # input/output/error: the parameter names a kube-apiserver gives a kubelet
    query = urlencode([("command", "sh"), ("command", "-c"),
                       ("command", "cat; echo to-stderr >&2; exit 4"),
                       ("input", "1"), ("output", "1"), ("error", "1")])
    got = asyncio.run(_spdy_exec(server.port, apiserver, query, b"piped in\n"))
    assert got["stdout"] == b"piped in\n"
    assert got["stderr"] == b"to-stderr\n"
    status = json.loads(got["error"])
    assert status["reason"] == "NonZeroExitCode"
    assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "4"}]


def test_port_forward_over_a_spdy_upgrade(node) -> None:
    server, pki, _tls, _ = node
    apiserver = _context(pki / NODE_CA_CERT, _api_client(pki))

    async def scenario() -> tuple[bytes, bytes]:
        async def shout(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            w.write((await r.readline()).upper())
            await w.drain()
            w.close()

        listener = await asyncio.start_server(shout, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port, ssl=apiserver,
                                                       server_hostname="127.0.0.1")
        writer.write(b"POST /portForward/t/p HTTP/1.1\r\nHost: node\r\nConnection: Upgrade\r\n"
                     b"Upgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: portforward.k8s.io\r\n"
                     b"Content-Length: 0\r\n\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101") and b"portforward.k8s.io" in head, head
        codec = HeaderCodec()
        for stream, kind in ((1, "error"), (3, "data")):
            writer.write(control_frame(SYN_STREAM, 0, struct.pack(">IIH", stream, 0, 0) +
                                       codec.encode({"streamtype": kind, "port": str(port),
                                                     "requestid": "0"})))
        writer.write(data_frame(3, b"through the pod\n", fin=True))
        await writer.drain()
        data, errors, buffer = b"", b"", bytearray()
        while True:
            chunk = await asyncio.wait_for(reader.read(65536), 15)
            if not chunk:
                break
            buffer += chunk
            frames = parse_frames(buffer)
            for frame in frames:
                if not frame.control and frame.stream == 3:
                    data += frame.payload
                elif not frame.control and frame.stream == 1:
                    errors += frame.payload
            if any(not f.control and f.stream == 1 and f.flags & FLAG_FIN for f in frames):
                break
        writer.close()
        listener.close()
        return data, errors

    data, errors = asyncio.run(scenario())
    assert (data, errors) == (b"THROUGH THE POD\n", b"")


def test_a_command_not_reading_its_input_holds_up_only_its_own_stream(node) -> None:
    server, pki, _tls, _ = node
    apiserver = _context(pki / NODE_CA_CERT, _api_client(pki))

    async def scenario() -> tuple[int, bytes]:
        url = f"wss://127.0.0.1:{server.port}/exec/t/p/c?command=sleep&command=20&stdin=1"
        async with connect(url, ssl=apiserver, subprotocols=["v5.channel.k8s.io"],  # type: ignore[list-item]
                           proxy=None, max_size=None, close_timeout=1) as ws:
            for _ in range(8):  # 2 MiB: far more than a pipe holds
                await ws.send(b"\x00" + b"x" * (256 << 10))
            # the server's loop still answers others
            return await asyncio.to_thread(_get, server.port, apiserver, "/healthz")

    assert asyncio.run(asyncio.wait_for(scenario(), 30)) == (200, b"ok")


class _UnreachableApi:
    """Stands in for an API server that cannot be reached (the real one is used end to end
    in tests/e2e/test_kubectl_streams.py): every call fails as a dead connection does."""

    def __init__(self) -> None:
        self.calls = 0

    def create(self, path: str, body: dict) -> dict:
        self.calls += 1
        raise ConnectionRefusedError("connection refused")


def test_a_review_the_api_could_not_answer_refuses_and_is_asked_again() -> None:
    api = _UnreachableApi()
    check = CallerCheck(api, "n")  # type: ignore[arg-type]
    for _ in range(2):
        verdict = check.check(None, "Bearer some-token", "get")
        assert verdict.code == 401 and "could not be reviewed" in verdict.message
    assert api.calls == 2  # not kept: the next request asks again
