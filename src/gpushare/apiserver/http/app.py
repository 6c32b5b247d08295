"""HTTP: the ASGI application. Each request goes through the pipeline of `pipeline`:
`RequestInfo` → filters → the handler table of `handlers` → the registry → the store
(→ watchers); this module holds the routes that are not resources (health, metrics,
discovery, OpenAPI) and the one place where an exception becomes a `Status`."""

from __future__ import annotations

import asyncio
import logging
import ssl
import time

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gpushare import __version__
from gpushare.api.plugins import Mount, ServerPlugin
from gpushare.apiserver.auth.access import Authorizer, TokenFile, User
from gpushare.apiserver.auth.privilege import REQUEST_USER, PrivilegeAdmission
from gpushare.apiserver.auth.serviceaccounts import ServiceAccountTokens, TokenSigner
from gpushare.apiserver.errors import ApiError, bad_request, not_found
from gpushare.apiserver.http import discovery, limits, requestinfo
from gpushare.apiserver.http.content import JSON, json_response
from gpushare.apiserver.http.handlers import ResourceHandlers
from gpushare.apiserver.http.openapi import OpenApiCache
from gpushare.apiserver.http.pipeline import NOT_FOUND, Filters, RequestContext, status_error
from gpushare.apiserver.http.reads import Reads
from gpushare.apiserver.http.streams import NodeStreams
from gpushare.apiserver.registry.api import DEFAULT_CLUSTER, Api
from gpushare.apiserver.registry.certificates import NodeServingSigner
from gpushare.apiserver.registry.gc import GarbageCollector
from gpushare.apiserver.schema import fieldvalidation
from gpushare.apiserver.storage.store import StoreUnavailable
from gpushare.apiserver.storage.watch import WatchHub
from gpushare.apiserver.telemetry.metrics import Metrics
from gpushare.apiserver.telemetry.pushes import ComponentMetrics, ResourceUsage, parse_exposition

log = logging.getLogger(__name__)

_PUBLIC = {"/healthz", "/livez", "/readyz", "/version"}
_ROOT_PATHS = ["/api", "/api/v1", "/apis", "/healthz", "/metrics", "/openapi/v2",
               "/openapi/v3", "/version"]


class App:
    """The ASGI application."""

    def __init__(self, api: Api, tokens: TokenFile, server_address: str,
                 bookmark_interval: float = 60.0, event_ttl: float = 3600.0,
                 max_body_bytes: int = limits.DEFAULT_MAX_BODY_BYTES,
                 anonymous_metrics: bool = False,
                 signer: TokenSigner | None = None,
                 node_signer: NodeServingSigner | None = None,
                 node_tls: ssl.SSLContext | None = None) -> None:
        self.api = api
        self.max_body_bytes = max_body_bytes
        # /metrics needs a token allowed `get` on it (the system:monitoring role) unless
        # the operator chose to let anybody scrape
        self.anonymous_metrics = anonymous_metrics
        self.store = api.store
        self.hub = WatchHub(api.store)
        self.tokens = tokens
        self.sa_tokens = ServiceAccountTokens(api.store, signer or TokenSigner())
        self.authorizer = Authorizer(api.store)
        api.admission_hooks.append(PrivilegeAdmission(self.authorizer))
        self.openapi = OpenApiCache()
        self.gc = GarbageCollector(api, event_ttl=event_ttl)
        self.server_address = server_address
        self.metrics = Metrics(lambda: self.hub.count, api.store.total_objects,
                               lambda: api.store.rv, lambda: api.store.writes,
                               lambda: api.store.commits)
        # What the controllers and node agents push (their figures, their measurements).
        self.components = ComponentMetrics()
        self.usage = ResourceUsage()
        # a push never overrides the server's own families
        self._own_families = frozenset(
            parse_exposition(self.metrics.render(), {}).keys())
        self._gc_task: asyncio.Task[None] | None = None
        self.filters = Filters(api, tokens, self.sa_tokens, self.authorizer)
        self.streams = NodeStreams(api.store, self.filters, self.metrics, node_tls)
        self.handlers = ResourceHandlers(
            api, self.filters, Reads(api, self.hub, bookmark_interval), self.streams, tokens,
            self.sa_tokens, self.usage, max_body_bytes, node_signer)

        # unauthenticated routes of the plug-ins: path prefix -> route
        self.mounts: dict[str, Mount] = {}

    def install(self, plugin: ServerPlugin) -> None:
        """Put a plug-in's hooks in place, then its CRDs."""
        self.api.admission_hooks.extend(plugin.admission)
        self.filters.request_policies.extend(plugin.request_policies)
        self.streams.log_targets.extend(plugin.log_targets)
        self.mounts.update(plugin.mounts)
        for crd in plugin.crds:
            self.api.keep_crd(DEFAULT_CLUSTER, crd)

    def _mount(self, path: str) -> tuple[str, Mount] | None:
        for prefix, route in self.mounts.items():
            if path == prefix or path.startswith(prefix + "/"):
                return prefix, route
        return None

    # -- ASGI ------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] == "websocket":
            await self.streams.websocket(scope, receive, send)
            return
        if scope["type"] != "http":
            return
        start = time.perf_counter()
        request = Request(scope, receive)
        verb, resource = request.method.lower(), ""
        try:
            response, verb, resource = await self.handle(request)
        except Exception as e:
            response = self._status(e, f"{request.method} {scope['path']}")
        if self.store.pending:
            try:
                await self.store.durable()  # acknowledge (or show) only committed writes
            except StoreUnavailable as e:
                response = self._status(e)
        for text in fieldvalidation.take_warnings():  # what field validation dropped
            response.headers.append("Warning", '299 - "' + text.replace('"', '\\"') + '"')
        await response(scope, receive, send)
        if verb != "watch":
            self.metrics.observe(verb, resource, response.status_code,
                                 time.perf_counter() - start)
        else:
            self.metrics.observe(verb, resource, response.status_code, 0.0)

    @staticmethod
    def _status(e: Exception, where: str = "") -> Response:
        error = status_error(e, where)
        return json_response(error.status_body(), error.code)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.store.attach(asyncio.get_running_loop())
                self._gc_task = asyncio.get_running_loop().create_task(self.gc.run())
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._gc_task is not None:
                    self._gc_task.cancel()
                self.store.attach(None)
                await send({"type": "lifespan.shutdown.complete"})
                return

    # -- the pipeline ------------------------------------------------------------------------

    async def handle(self, request: Request) -> tuple[Response, str, str]:
        """(response, verb, resource) of one request: its `RequestInfo`, the routes open
        to everybody, the filters, then its handler."""
        info = requestinfo.parse(request.method, request.scope["path"],
                                 request.query_params.get("watch"))
        path = info.path
        if path in _PUBLIC:
            return self._public(path), "get", path
        mounted = self._mount(path)
        if mounted is not None:  # a plug-in's static files (the dashboard reads the API)
            return mounted[1](path), "get", mounted[0].lstrip("/")
        if path == "/metrics":
            return self._metrics(request, info.cluster), "get", path
        info = self.filters.home(request, info)  # a tenant's token without its prefix
        ctx = RequestContext(request, info, dict(request.query_params))
        ctx.user = self.filters.identify(request, info.cluster)
        REQUEST_USER.set(ctx.user)  # for admission: who is writing
        self.filters.cluster_exists(ctx)
        if not info.is_resource_request:
            return await self._non_resource(ctx)
        for step in (self.filters.resolve, self.filters.authorize, self.filters.admit):
            step(ctx)
        handler = self.handlers.route(ctx)
        response = await handler(ctx)
        return response, ctx.metric_verb, ctx.metric_resource

    async def _non_resource(self, ctx: RequestContext) -> tuple[Response, str, str]:
        """Telemetry pushes, the root listing, OpenAPI and discovery: every authenticated
        user may read discovery and OpenAPI, as in Kubernetes."""
        info, request = ctx.info, ctx.request
        if info.path.startswith("/metrics/"):
            return (await self._telemetry_push(request, info.cluster, ctx.user, info.path),
                    "put", "telemetry")
        parts = list(info.parts)
        if not parts:
            return json_response({"paths": _ROOT_PATHS}), "get", "/"
        if parts[0] == "openapi":
            return self._openapi(request, info.cluster, parts, info.prefix), "get", "openapi"
        reg = self.api.registry(info.cluster)
        if parts[0] == "api":
            if len(parts) == 1:
                return self._discovery_root(request, info.cluster, core=True), "get", "discovery"
            if parts[1] != "v1":
                raise not_found("", "", info.path)
            return json_response(discovery.resource_list(reg, "", "v1")), "get", "discovery"
        if parts[0] != "apis":
            raise ApiError(404, NOT_FOUND, "NotFound")
        if len(parts) == 1:
            return self._discovery_root(request, info.cluster, core=False), "get", "discovery"
        group = parts[1]
        if group not in reg.versions or (len(parts) == 3 and parts[2] not in reg.versions[group]):
            raise ApiError(404, NOT_FOUND, "NotFound")
        if len(parts) == 2:
            return json_response(discovery.api_group(reg, group)), "get", "discovery"
        return (json_response(discovery.resource_list(reg, group, parts[2])), "get",
                "discovery")

    # -- routes that are not resources -------------------------------------------------------

    def _public(self, path: str) -> Response:
        if path == "/version":
            return json_response({"major": "1", "minor": "32", "gitVersion": "v1.32.0-gpushare",
                                  "gitCommit": __version__, "gitTreeState": "clean",
                                  "buildDate": "2026-01-01T00:00:00Z", "goVersion": "python",
                                  "compiler": "cpython", "platform": "linux/amd64"})
        if path in ("/readyz", "/healthz") and not self.store.probe():
            # Not ready while the store cannot commit: a load balancer sends clients
            # elsewhere; /livez stays ok (restarting would not help a full disk).
            return Response(f"[-]store failed: {self.store.last_error}\n"
                            f"{path[1:]} check failed".encode(), 503,
                            media_type="text/plain")
        return Response(b"ok", 200, media_type="text/plain")

    def _metrics(self, request: Request, cluster: str) -> Response:
        """The control plane's figures and every component's: host-wide, so served for the
        host cluster only, to a token with nonResourceURL `get` on /metrics."""
        if cluster != DEFAULT_CLUSTER:
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        if not self.anonymous_metrics:
            user = self.filters.identify(request, cluster)
            if not self.authorizer.non_resource_allowed(cluster, user, "/metrics", "get"):
                raise ApiError(403, f'forbidden: User "{user.name}" cannot get path '
                                    '"/metrics"', "Forbidden")
        body = self.metrics.render() + self.components.render(self._own_families)
        return Response(body, 200,
                        media_type="text/plain; version=0.0.4; charset=utf-8")

    async def _telemetry_push(self, request: Request, cluster: str, user: User,
                              path: str) -> Response:
        """``PUT /metrics/components/<component>/<instance>`` (Prometheus text) and
        ``PUT /metrics/resource/<node>`` (an agent's measurements, JSON)."""
        parts = path.split("/")[2:]
        if cluster != DEFAULT_CLUSTER or len(parts) not in (2, 3) or parts[0] not in (
            "components", "resource"
        ) or (parts[0] == "components") != (len(parts) == 3):
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        if request.method not in ("PUT", "POST"):
            raise ApiError(405, f"method {request.method} is not allowed", "MethodNotAllowed")
        if not self.authorizer.non_resource_allowed(cluster, user, path, "put"):
            raise ApiError(403, f'forbidden: User "{user.name}" cannot put path "{path}"',
                           "Forbidden")
        raw = await limits.read_body(request, self.max_body_bytes)
        interval = request.query_params.get("interval")
        if parts[0] == "components":
            samples = self.components.push(parts[1], parts[2], raw, interval)
            return json_response({"samples": samples})
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            raise bad_request(f"body: not JSON: {e}") from e
        self.usage.push(parts[1], body, interval)
        return json_response({"nodes": 1})

    def _discovery_root(self, request: Request, cluster: str, core: bool) -> Response:
        reg = self.api.registry(cluster)
        accept = request.headers.get("accept", "")
        if "as=APIGroupDiscoveryList" in accept:
            for media, version in ((discovery.AGGREGATED_V2, "apidiscovery.k8s.io/v2"),
                                   (discovery.AGGREGATED_V2BETA1,
                                    "apidiscovery.k8s.io/v2beta1")):
                marker = media.split(";", 1)[1].split(";as=")[0]  # g=...;v=...
                if marker in accept.replace(" ", ""):
                    return json_response(discovery.aggregated(reg, core, version), 200, media)
        if core:
            return json_response(discovery.api_versions(self.server_address))
        return json_response(discovery.api_group_list(reg))

    def _openapi(self, request: Request, cluster: str, parts: list[str],
                 prefix: str) -> Response:
        reg = self.api.registry(cluster)
        if len(parts) >= 2 and parts[1] == "v2":
            return Response(self.openapi.v2(cluster, reg), 200, media_type=JSON)
        if len(parts) >= 2 and parts[1] == "v3":
            if len(parts) == 2:
                return json_response(self.openapi.v3_root(cluster, reg, prefix))
            docs, _hashes = self.openapi.v3(cluster, reg)
            doc = docs.get("/".join(parts[2:]))
            if doc is None:
                raise ApiError(404, "the server could not find the requested resource",
                               "NotFound")
            return Response(doc, 200, media_type=JSON,
                            headers={"Cache-Control": "public, immutable"})
        raise ApiError(404, "the server could not find the requested resource", "NotFound")

