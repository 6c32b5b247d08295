"""Limits on what a request may make the server do: body size, YAML aliases and nesting.

The defaults follow etcd and kube-apiserver: a request body (and a stored object) of at
most 3 MiB (etcd's `--max-request-bytes` is 1.5 MiB, kube-apiserver accepts 3 MiB bodies).
YAML aliases are refused: an alias expands to a copy of its anchor, so a few hundred bytes
of nested aliases ("billion laughs") would become gigabytes. Nesting is bounded so that no
body can make a recursive reader (validation, patches, copies) run out of stack.
"""

from __future__ import annotations

from typing import Any

import yaml
from starlette.requests import Request

from gpushare.apiserver.errors import ApiError, bad_request

DEFAULT_MAX_BODY_BYTES = 3 * 1024 * 1024
MAX_DEPTH = 100


def too_large(limit: int) -> ApiError:
    return ApiError(413, f"Request entity too large: limit is {limit}", "RequestEntityTooLarge")


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, or 413 as soon as it is known to exceed `limit` bytes."""
    length = request.headers.get("content-length")
    if length is not None:
        try:
            declared = int(length)
        except ValueError as e:
            raise bad_request("invalid Content-Length") from e
        if declared > limit:
            raise too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


class BoundedLoader(yaml.SafeLoader):
    """A safe loader that refuses aliases and documents nested deeper than MAX_DEPTH."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, f"YAML aliases are not allowed (alias *{event.anchor})",
                event.start_mark)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"the document is nested deeper than {MAX_DEPTH} levels",
                    self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def load_yaml(raw: bytes) -> Any:
    """Parse one YAML document (aliases refused, nesting bounded)."""
    return yaml.load(raw, Loader=BoundedLoader)


def check_depth(value: Any, limit: int = MAX_DEPTH) -> None:
    """400 if a decoded JSON body is nested deeper than `limit` (objects and arrays)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            raise bad_request(f"the request body is nested deeper than {limit} levels")
        for child in children:
            if isinstance(child, dict | list):
                stack.append((child, depth + 1))
