"""The reading verbs: get, list (selectors, paging, exact versions, Tables) and watch."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from gpushare.apiserver.errors import ApiError, bad_request
from gpushare.apiserver.http import tables
from gpushare.apiserver.http.content import JSON, json_response, wants_table
from gpushare.apiserver.http.pipeline import RequestContext
from gpushare.apiserver.registry import crds
from gpushare.apiserver.registry.api import Api
from gpushare.apiserver.registry.query import paginate, select
from gpushare.apiserver.resources import ResourceInfo
from gpushare.apiserver.storage import versions
from gpushare.apiserver.storage.selectors import parse_field_selector, parse_label_selector
from gpushare.apiserver.storage.watch import Watcher, WatchHub, encode_event, stream

DEFAULT_WATCH_TIMEOUT = 1800.0


class Reads:
    def __init__(self, api: Api, hub: WatchHub, bookmark_interval: float) -> None:
        self.api = api
        self.store = api.store
        self.hub = hub
        self.bookmark_interval = bookmark_interval

    async def get_object(self, ctx: RequestContext) -> Response:
        obj = self.api.get(ctx.info.cluster, ctx.resource, ctx.ns, ctx.name)
        return self.render(ctx.request, ctx.resource, [obj], single=True)

    def select(self, ctx: RequestContext) -> list[dict[str, Any]]:
        return select(self.store, ctx.info.cluster, ctx.resource, ctx.info.namespace, ctx.query)

    def list_body(self, info: ResourceInfo, items: list[dict[str, Any]],
                  list_meta: dict[str, Any]) -> dict[str, Any]:
        if (info.crd and crds.has_defaults(info.schema)) or any(
                o.get("apiVersion") != info.api_version for o in items):
            items = [self.api.served(info, o) for o in items]
        return {"kind": info.list_kind, "apiVersion": info.api_version, "metadata": list_meta,
                "items": items}

    async def list_objects(self, ctx: RequestContext) -> Response:
        requested, match = versions.list_request(ctx.query)
        if requested:
            # NotOlderThan (or none) and Exact both need a state the server has reached.
            await versions.wait_for(self.store, requested)
        rv = self.store.rv
        items = self.select(ctx)
        if requested and match == versions.EXACT:
            items = self._exact(ctx, items, requested)
            rv = requested
        items, list_meta = paginate(items, ctx.query, rv)
        return self.render(ctx.request, ctx.resource, items, single=False, list_meta=list_meta)

    def _exact(self, ctx: RequestContext, items: list[dict[str, Any]],
               rv: int) -> list[dict[str, Any]]:
        info = ctx.resource
        labels = parse_label_selector(ctx.query.get("labelSelector"))
        fields = parse_field_selector(ctx.query.get("fieldSelector"), info.group_resource)
        scope = Watcher(ctx.info.cluster, info.group_resource,
                        ctx.info.namespace if info.namespaced else None, labels, fields)
        return versions.objects_at(self.store, ctx.info.cluster, info.group_resource, items,
                                   rv, scope.matches)

    def render(self, request: Request, info: ResourceInfo, items: list[dict[str, Any]],
               single: bool, list_meta: dict[str, Any] | None = None) -> Response:
        accept = request.headers.get("accept", "")
        if "as=Table" in accept and wants_table(accept):
            include = request.query_params.get("includeObject", "Metadata")
            meta = list_meta or {"resourceVersion": items[0]["metadata"]["resourceVersion"]}
            return json_response(tables.to_table(info, items, include, meta))
        if single:
            return json_response(self.api.served(info, items[0]))
        return json_response(self.list_body(info, items, list_meta or {}))

    async def watch_objects(self, ctx: RequestContext) -> Response:
        query, info = ctx.query, ctx.resource
        labels = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector"), info.group_resource)
        send_initial, timeout = _watch_options(query)
        rv_param = query.get("resourceVersion") or ""
        watcher = Watcher(ctx.info.cluster, info.group_resource,
                          ctx.info.namespace if info.namespaced else None, labels, fields,
                          min_rv=self.store.rv)
        initial: list[tuple[str, dict[str, Any]]] = []
        accept = ctx.request.headers.get("accept", "")
        as_table = "as=Table" in accept and wants_table(accept)
        encode = self._table_encoder(info, ctx.request) if as_table else self._encoder(info)
        if send_initial == "true" or rv_param in ("", "0"):
            if send_initial != "false":
                initial = [("ADDED", o) for o in self.select(ctx)]
        else:
            refused = await self._replay(ctx, watcher, versions.parse_rv(rv_param), encode)
            if refused is not None:
                return refused
        self.hub.add(watcher)

        def bookmark(rv: int, initial_end: bool) -> dict[str, Any]:
            m: dict[str, Any] = {"resourceVersion": str(rv)}
            if initial_end:
                m["annotations"] = {"k8s.io/initial-events-end": "true"}
            return {"kind": info.kind, "apiVersion": info.api_version, "metadata": m}

        body_iter: AsyncIterator[bytes] = stream(
            self.hub, watcher, initial, encode, timeout,
            query.get("allowWatchBookmarks") == "true", bookmark, send_initial == "true",
            self.bookmark_interval)
        return StreamingResponse(body_iter, 200, media_type=JSON)

    async def _replay(self, ctx: RequestContext, watcher: Watcher, since: int,
                      encode: Any) -> Response | None:
        """Offer the watcher the events after `since`; an ERROR event when it cannot."""
        try:
            await versions.wait_for(self.store, since)
        except ApiError as e:  # too large: an ERROR event, as kube-apiserver's cache does
            return Response(encode_event("ERROR", e.status_body()), 200, media_type=JSON)
        watcher.min_rv = since
        events = self.store.events_since(since)
        if events is None:
            status = versions.too_old(since, self.store).status_body()
            return Response(encode_event("ERROR", status), 200, media_type=JSON)
        gr = ctx.resource.group_resource
        for event in events:
            if event.cluster == ctx.info.cluster and event.gr == gr:
                watcher.offer(event)
        return None

    def _encoder(self, info: ResourceInfo) -> Any:
        api_version = info.api_version

        read_defaults = info.crd and crds.has_defaults(info.schema)

        def encode(typ: str, obj: dict[str, Any], data: bytes | None) -> bytes:
            if read_defaults and typ in ("ADDED", "MODIFIED", "DELETED"):
                return encode_event(typ, self.api.served(info, obj))
            if obj.get("apiVersion") != api_version and typ != "ERROR" and "kind" in obj:
                if typ != "BOOKMARK" and info.storage_group_resource:
                    return encode_event(typ, self.api.served(info, obj))
                return encode_event(typ, {**obj, "apiVersion": api_version})
            return encode_event(typ, obj, data)
        return encode

    @staticmethod
    def _table_encoder(info: ResourceInfo, request: Request) -> Any:
        include = request.query_params.get("includeObject", "Metadata")
        first = [True]

        def encode(typ: str, obj: dict[str, Any], _data: bytes | None) -> bytes:
            if typ in ("ERROR", "BOOKMARK"):
                return encode_event(typ, obj)
            table = tables.to_table(info, [obj], include,
                                    {"resourceVersion": obj["metadata"]["resourceVersion"]},
                                    with_columns=first[0])
            first[0] = False
            return encode_event(typ, table)
        return encode


def _watch_options(query: dict[str, str]) -> tuple[str | None, float]:
    """(sendInitialEvents, timeout) of a watch, checked as Kubernetes checks them."""
    timeout = DEFAULT_WATCH_TIMEOUT
    if query.get("timeoutSeconds"):
        try:
            timeout = float(query["timeoutSeconds"])
        except ValueError as e:
            raise bad_request("timeoutSeconds must be a number") from e
    send_initial = query.get("sendInitialEvents")
    if send_initial not in (None, "true", "false"):
        raise bad_request("sendInitialEvents must be true or false")
    if send_initial == "true" and query.get("resourceVersionMatch") != "NotOlderThan":
        raise ApiError(422, "sendInitialEvents=true requires "
                            "resourceVersionMatch=NotOlderThan", "Invalid")
    if send_initial == "true" and query.get("allowWatchBookmarks") != "true":
        raise ApiError(422, "sendInitialEvents=true requires allowWatchBookmarks=true",
                       "Invalid")
    return send_initial, timeout
