"""`pods/log`: proxy to the node agent's `/containerLogs/...` endpoint (kubelet style)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote, urlencode

from gpushare.apiserver.errors import ApiError, bad_request

_PASSED_PARAMS = ("follow", "tailLines", "timestamps", "previous", "sinceSeconds", "limitBytes",
                  "sinceTime")


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
        raise ApiError(503, f"node {node['metadata']['name']} does not publish a log endpoint",
                       "ServiceUnavailable")
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


async def open_log_stream(
    host: str, port: int, namespace: str, pod: str, container: str, query: dict[str, str]
) -> AsyncIterator[bytes]:
    """Connects and checks the response status, then returns the body as an async iterator."""
    params = {k: query[k] for k in _PASSED_PARAMS if k in query}
    path = f"/containerLogs/{quote(namespace)}/{quote(pod)}/{quote(container)}"
    if params:
        path += "?" + urlencode(params)
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 5)
    except (OSError, TimeoutError) as e:
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
