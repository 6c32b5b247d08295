"""Large answers built in slices: a list of thousands of objects (or of a few huge ones)
is serialised item by item, the event loop given back to other requests between slices
(`cooperative.Slicer`), instead of in one call that holds every other tenant up."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from starlette.responses import Response

from gpushare.apiserver.cooperative import Slicer
from gpushare.apiserver.http import tables
from gpushare.apiserver.http.content import JSON
from gpushare.apiserver.resources import ResourceInfo

#: rows of a Table rendered between two pauses
TABLE_CHUNK = 200


async def list_json(head: dict[str, Any], items: list[dict[str, Any]],
                    convert: Callable[[dict[str, Any]], dict[str, Any]] | None,
                    slicer: Slicer) -> bytes:
    """`{**head, "items": [...]}` as JSON, the same bytes `orjson.dumps` gives."""
    parts: list[bytes] = []
    for obj in items:
        parts.append(orjson.dumps(convert(obj) if convert is not None else obj))
        await slicer.pause()
    start = orjson.dumps(head)
    return b"".join((start[:-1], b',"items":[' if head else b'{"items":[', b",".join(parts),
                     b"]}"))


async def list_response(head: dict[str, Any], items: list[dict[str, Any]],
                        convert: Callable[[dict[str, Any]], dict[str, Any]] | None,
                        slicer: Slicer, code: int = 200) -> Response:
    body = await list_json(head, items, convert, slicer)
    await slicer.pause()
    return Response(body, code, media_type=JSON)


async def table(info: ResourceInfo, items: list[dict[str, Any]], include: str,
                list_meta: dict[str, Any], slicer: Slicer) -> Response:
    """`tables.to_table` of `items`, rendered TABLE_CHUNK rows at a time."""
    out = tables.to_table(info, items[:TABLE_CHUNK], include, list_meta)
    for start in range(TABLE_CHUNK, len(items), TABLE_CHUNK):
        await slicer.pause()
        part = tables.to_table(info, items[start:start + TABLE_CHUNK], include, list_meta,
                               with_columns=False)
        out["rows"].extend(part["rows"])
    await slicer.pause()
    body = orjson.dumps(out)
    return Response(body, 200, media_type=JSON)
