"""The API server's side of the node link: `pods/log`, `exec`, `attach` and `portforward`
proxied to the agent's HTTPS node endpoint, as kube-apiserver proxies them to a kubelet.

The API server shows its client certificate (`pki/node-client.crt`, signed by the cluster
CA) and checks the agent's serving certificate against the same CA and the node's address.
Streams are WebSockets end to end: kubectl's messages are relayed to the agent unchanged and
the agent's back, so the channel protocol (`v5`/`v4.channel.k8s.io`) and the SPDY tunnel of
port-forward are spoken by the agent alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import orjson
from starlette.types import Receive, Send
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from gpushare.api.contracts import node_hop_subprotocol
from gpushare.apiserver.errors import ApiError, bad_request

_PASSED_LOG_PARAMS = ("follow", "tailLines", "timestamps", "previous", "sinceSeconds",
                      "limitBytes", "sinceTime")
STREAM_SUBRESOURCES = ("exec", "attach", "portforward")
_AGENT_PATHS = {"exec": "exec", "attach": "attach", "portforward": "portForward"}
_ERROR_CHANNEL = 3
#: How long after accepting a stream the first message to the client waits. client-go
#: (kubectl, v5 channel protocol) starts reading the connection before it has made its
#: stream ends and drops what arrives for an end not yet made: a command that answers at
#: once (`exec -- true`) would lose its output and exit code to a client a loaded machine
#: had not yet scheduled. A node runtime's process start gives it that time in kubelet.
CLIENT_SETUP_S = 0.3


def client_context(ca: Path, cert: Path, key: Path) -> ssl.SSLContext:
    """TLS to node agents: their certificates must be the CA's; ours goes with it."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca))
    context.load_cert_chain(str(cert), str(key))
    return context


def agent_endpoint(node: dict[str, Any]) -> tuple[str, int]:
    status = node.get("status") or {}
    port = ((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port")
    host = None
    for addr in status.get("addresses") or ():
        if addr.get("type") == "InternalIP":
            host = addr.get("address")
            break
    if not host:
        for addr in status.get("addresses") or ():
            if addr.get("type") == "Hostname":
                host = addr.get("address")
    if not port or not host:
        raise ApiError(503, f"node {node['metadata']['name']} does not publish a node "
                            "endpoint", "ServiceUnavailable")
    return str(host), int(port)


def container_name(pod: dict[str, Any], requested: str | None) -> str:
    containers = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or ()]
    if requested:
        init = [c.get("name") for c in (pod.get("spec") or {}).get("initContainers") or ()]
        if requested not in containers and requested not in init:
            raise bad_request(f"container {requested} is not valid for pod "
                              f"{pod['metadata']['name']}")
        return requested
    if len(containers) == 1:
        return str(containers[0])
    raise bad_request(f"a container name must be specified for pod {pod['metadata']['name']}, "
                      f"choose one of: [{' '.join(str(c) for c in containers)}]")


def stream_path(sub: str, ns: str, pod: str, container: str,
                query: list[tuple[str, str]]) -> str:
    """The agent's path for a stream subresource (the query keeps repeated `command`s)."""
    path = f"/{_AGENT_PATHS[sub]}/{quote(ns)}/{quote(pod)}"
    if sub != "portforward":
        path += f"/{quote(container)}"
    passed = [(k, v) for k, v in query if k != "container"]
    return path + ("?" + urlencode(passed) if passed else "")


# --- logs ------------------------------------------------------------------------------


async def open_log_stream(
    context: ssl.SSLContext, host: str, port: int, namespace: str, pod: str, container: str,
    query: dict[str, str],
) -> AsyncIterator[bytes]:
    """Connects and checks the response status, then returns the body as an async iterator."""
    params = {k: query[k] for k in _PASSED_LOG_PARAMS if k in query}
    path = f"/containerLogs/{quote(namespace)}/{quote(pod)}/{quote(container)}"
    if params:
        path += "?" + urlencode(params)
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=context, server_hostname=host), 10)
    except (OSError, TimeoutError, ssl.SSLError) as e:
        raise ApiError(503, f"cannot reach the node agent at {host}:{port}: {e}",
                       "ServiceUnavailable") from e
    writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n"
                 .encode())
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    try:
        code = int(lines[0].split()[1])
    except (IndexError, ValueError) as e:
        writer.close()
        raise ApiError(502, "bad response from the node agent", "InternalError") from e
    headers = {k.strip().lower(): v.strip() for k, _, v in
               (line.partition(":") for line in lines[1:] if line)}
    chunked = headers.get("transfer-encoding", "").lower() == "chunked"
    if code >= 400:
        body = await _read_all(reader, chunked, headers)
        writer.close()
        message = body.decode(errors="replace").strip() or f"node agent answered {code}"
        if code == 400:  # e.g. `--previous` with no terminated container, as kubelet says
            raise bad_request(message)
        raise ApiError(404 if code == 404 else 502, message)
    return _body(reader, writer, chunked)


async def _read_all(reader: asyncio.StreamReader, chunked: bool, headers: dict[str, str]) -> bytes:
    if chunked:
        return b"".join([c async for c in _chunks(reader)])
    if "content-length" in headers:
        return await reader.readexactly(int(headers["content-length"]))
    return await reader.read()


async def _chunks(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    while True:
        size_line = await reader.readline()
        if not size_line:
            return
        size = int(size_line.split(b";")[0].strip() or b"0", 16)
        if size == 0:
            return
        data = await reader.readexactly(size)
        await reader.readline()
        yield data


async def _body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                chunked: bool) -> AsyncIterator[bytes]:
    try:
        if chunked:
            async for chunk in _chunks(reader):
                yield chunk
        else:
            while True:
                data = await reader.read(65536)
                if not data:
                    return
                yield data
    finally:
        writer.close()


# --- streams -------------------------------------------------------------------------------


async def reject(send: Send, error: ApiError) -> None:
    """Refuse a WebSocket upgrade with the error's Status as an HTTP answer."""
    body = orjson.dumps(error.status_body())
    await send({"type": "websocket.http.response.start", "status": error.code,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "websocket.http.response.body", "body": body})


def _status(message: str, code: int, reason: str) -> bytes:
    return orjson.dumps({"metadata": {}, "status": "Failure", "message": message,
                         "reason": reason, "code": code})


async def _open_agent(context: ssl.SSLContext, host: str, port: int, path: str,
                      offered: list[str]) -> ClientConnection:
    try:
        return await connect(f"wss://{host}:{port}{path}", ssl=context, server_hostname=host,
                             subprotocols=offered or None,  # type: ignore[arg-type]
                             compression=None, max_size=None, ping_interval=None,
                             proxy=None, open_timeout=10)
    except InvalidStatus as e:
        message = e.response.body.decode(errors="replace").strip() if e.response.body \
            else f"node agent answered {e.response.status_code}"
        code = e.response.status_code
        raise ApiError(code if code in (400, 404) else 502, message,
                       "NotFound" if code == 404 else "BadRequest" if code == 400
                       else "InternalError") from e
    except (OSError, TimeoutError, ssl.SSLError, InvalidHandshake) as e:
        raise ApiError(503, f"cannot reach the node agent at {host}:{port}: {e}",
                       "ServiceUnavailable") from e


async def relay(context: ssl.SSLContext, host: str, port: int, path: str,
                offered: list[str], receive: Receive, send: Send) -> None:
    """Connect to the agent, accept the client with the agent's subprotocol, and copy
    messages both ways until one side ends. An agent that refuses is reported on the
    error channel of the channel protocols, or as the upgrade's answer otherwise; an agent
    that drops the stream ends the client's with 1011, not a normal close."""
    hop = {node_hop_subprotocol(p): p for p in offered}
    try:
        agent = await _open_agent(context, host, port, path, list(hop))
    except ApiError as e:
        channel = next((p for p in offered if p.endswith(".channel.k8s.io")), None)
        if channel is None:
            await reject(send, e)
            return
        await send({"type": "websocket.accept", "subprotocol": channel})
        await asyncio.sleep(CLIENT_SETUP_S)
        await send({"type": "websocket.send", "bytes": bytes([_ERROR_CHANNEL]) +
                    _status(e.message, e.code, e.reason)})
        await send({"type": "websocket.close", "code": 1000})
        return
    await send({"type": "websocket.accept",
                "subprotocol": hop.get(agent.subprotocol or "", agent.subprotocol)})

    async def upstream() -> None:
        agent_open = True
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            data = message.get("bytes")
            if data is None and message.get("text") is not None:
                data = message["text"].encode()
            if data is not None and agent_open:
                try:
                    await agent.send(data)
                except ConnectionClosed:
                    # the agent has ended the stream: what it sent before still goes to
                    # the client (downstream), so this side only drains until then
                    agent_open = False

    async def downstream() -> None:
        await asyncio.sleep(CLIENT_SETUP_S)  # what the agent sends meanwhile waits in its socket
        with contextlib.suppress(ConnectionClosed):
            async for message in agent:
                data = message if isinstance(message, bytes) else message.encode()
                await send({"type": "websocket.send", "bytes": data})

    tasks = [asyncio.ensure_future(upstream()), asyncio.ensure_future(downstream())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        with contextlib.suppress(Exception):
            await agent.close()
        # a stream the agent dropped without closing it (1006) is no normal end: a client
        # told 1000 would take what it got, maybe no output and no status, for success
        end: dict[str, Any] = {"type": "websocket.close", "code": 1000}
        if agent.close_code != 1000:
            end = {"type": "websocket.close", "code": 1011,
                   "reason": "the node agent ended the stream abnormally"}
        with contextlib.suppress(Exception):
            await send(end)
