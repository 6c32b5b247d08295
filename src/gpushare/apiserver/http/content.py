"""Request and response bodies: decoding (JSON, YAML, protobuf), content negotiation."""

from __future__ import annotations

from typing import Any

import orjson
import yaml
from starlette.requests import Request
from starlette.responses import Response

from gpushare.apiserver.errors import ApiError, bad_request
from gpushare.apiserver.http import duplicates, limits, protobuf
from gpushare.apiserver.registry.api import PATCH_APPLY, PATCH_APPLY_CBOR

JSON = "application/json"
PROTOBUF_MEDIA = protobuf.PROTOBUF


def json_response(obj: Any, code: int = 200, media_type: str = JSON) -> Response:
    return Response(orjson.dumps(obj), code, media_type=media_type)


def wants_table(accept: str) -> bool:
    """Whether an Accept header asks for a meta.k8s.io/v1 Table; a client that accepts only
    Tables of other versions gets 406, as from Kubernetes."""
    plain = False
    for entry in accept.split(","):
        params = [p.strip() for p in entry.split(";")]
        options = dict(p.split("=", 1) for p in params[1:] if "=" in p)
        if options.get("as") == "Table":
            if options.get("v", "v1") == "v1" and options.get("g", "meta.k8s.io") == "meta.k8s.io":
                return True
        elif params[0] in ("application/json", "application/*", "*/*", "", PROTOBUF_MEDIA):
            plain = True
    if not plain:
        raise ApiError(406, "only the following media types are accepted: application/json, "
                            "application/yaml, application/vnd.kubernetes.protobuf, "
                            "application/json;as=Table;v=v1;g=meta.k8s.io", "NotAcceptable")
    return False


def field_manager(query: dict[str, str], user_agent: str) -> str:
    """The manager a write is recorded under: `fieldManager`, else the user agent's name."""
    name = query.get("fieldManager") or user_agent.split("/", 1)[0].strip()
    if len(name) > 128:
        raise bad_request("fieldManager may not be longer than 128 characters")
    return name or "unknown"


def content_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip()


async def read_body(request: Request, max_bytes: int, ctype: str | None = None,
                    allow_empty: bool = False) -> Any:
    """The request's body as JSON values, read within `max_bytes` (413 beyond)."""
    raw = await limits.read_body(request, max_bytes)
    if not raw:
        if allow_empty:
            return None
        raise bad_request("the request body is empty")
    ctype = ctype or content_type(request)
    duplicates.scan_body(raw, ctype)
    try:
        if ctype in (PATCH_APPLY, "application/yaml", "application/x-yaml"):
            return limits.load_yaml(raw)
        if ctype == protobuf.PROTOBUF:
            return protobuf.decode(raw)
        if ctype == PATCH_APPLY_CBOR:
            raise ApiError(415, "CBOR is not supported; send application/apply-patch+yaml",
                           "UnsupportedMediaType")
        body = orjson.loads(raw)
    except (orjson.JSONDecodeError, yaml.YAMLError, RecursionError) as e:
        raise bad_request(f"the request body is not valid: {e}") from e
    if raw.count(b"{") + raw.count(b"[") > limits.MAX_DEPTH:
        limits.check_depth(body)  # only a body with that many brackets can be too deep
    return body
