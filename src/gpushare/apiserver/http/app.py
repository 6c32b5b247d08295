"""HTTP: routing of Kubernetes API paths onto `Api`, content negotiation, auth, watches."""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import orjson
import yaml
from starlette.requests import HTTPConnection, Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from gpushare import __version__
from gpushare.apiserver.auth import reviews
from gpushare.apiserver.auth.access import AUTHENTICATED, Attributes, Authorizer, TokenFile, User
from gpushare.apiserver.auth.privilege import REQUEST_USER, PrivilegeAdmission
from gpushare.apiserver.auth.serviceaccounts import ServiceAccountTokens, TokenSigner, token_review
from gpushare.apiserver.errors import ApiError, bad_request, forbidden, not_found
from gpushare.apiserver.http import discovery, limits, nodeproxy, protobuf, tables
from gpushare.apiserver.http.openapi import OpenApiCache
from gpushare.apiserver.objects import status_success
from gpushare.apiserver.registry import crds
from gpushare.apiserver.registry.api import (
    DEFAULT_CLUSTER,
    PATCH_APPLY,
    PATCH_APPLY_CBOR,
    PATCH_JSON,
    Api,
    DeleteOptions,
)
from gpushare.apiserver.registry.certificates import NodeServingSigner
from gpushare.apiserver.registry.gc import GarbageCollector
from gpushare.apiserver.registry.query import paginate, select
from gpushare.apiserver.resources import ResourceInfo
from gpushare.apiserver.schema.patch import json_patch, merge_patch
from gpushare.apiserver.storage import versions
from gpushare.apiserver.storage.selectors import parse_field_selector, parse_label_selector
from gpushare.apiserver.storage.store import ObjectTooLarge, StoreUnavailable
from gpushare.apiserver.storage.watch import Watcher, WatchHub, encode_event, stream
from gpushare.apiserver.telemetry.metrics import Metrics
from gpushare.apiserver.telemetry.pushes import ComponentMetrics, ResourceUsage, parse_exposition
from gpushare.apiserver.telemetry.resource_metrics import METRICS_GROUP, resource_metrics_response
from gpushare.dashboard import dashboard_response

log = logging.getLogger(__name__)

JSON = "application/json"
_CLUSTER_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_PUBLIC = {"/healthz", "/livez", "/readyz", "/version"}
DEFAULT_WATCH_TIMEOUT = 1800.0


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


PROTOBUF_MEDIA = protobuf.PROTOBUF

#: Resources whose objects are answers, not stored objects with metadata: no Table form.
NON_TABULAR = frozenset({"selfsubjectaccessreviews", "selfsubjectreviews",
                         "subjectaccessreviews", "localsubjectaccessreviews",
                         "selfsubjectrulesreviews", "tokenreviews"})


def refuse_table_only(accept: str) -> None:
    """406 for a client that accepts nothing but a Table from a resource that has no Table
    form (Kubernetes: "backend which does not implement metadata"); a client that also
    accepts plain JSON gets JSON."""
    if "as=Table" not in accept:
        return
    for entry in accept.split(","):
        params = [p.strip() for p in entry.split(";")]
        if "as=Table" in params[1:]:
            continue
        if params[0] in ("application/json", "application/*", "*/*", "", PROTOBUF_MEDIA,
                         "application/yaml"):
            return
    raise ApiError(406, "the resource does not support the Table format: only the following "
                        "media types are accepted: application/json, application/yaml, "
                        "application/vnd.kubernetes.protobuf", "NotAcceptable")


_STREAM_PATH = re.compile(
    r"^(?:/clusters/(?P<cluster>[a-z0-9][-a-z0-9]*))?/api/v1/namespaces/(?P<ns>[^/]+)/"
    r"pods/(?P<name>[^/]+)/(?P<sub>exec|attach|portforward)/?$")


def _stream_request(path: str) -> tuple[str, str, str, str]:
    """(cluster, namespace, pod, subresource) of a WebSocket request; 404 for any other."""
    match = _STREAM_PATH.match(path)
    if match is None:
        raise ApiError(404, "the server could not find the requested resource", "NotFound")
    return (match["cluster"] or DEFAULT_CLUSTER, match["ns"], match["name"], match["sub"])


def field_manager(query: dict[str, str], user_agent: str) -> str:
    """The manager a write is recorded under: `fieldManager`, else the user agent's name."""
    name = query.get("fieldManager") or user_agent.split("/", 1)[0].strip()
    if len(name) > 128:
        raise bad_request("fieldManager may not be longer than 128 characters")
    return name or "unknown"


@dataclass(slots=True)
class ResourceRequest:
    info: ResourceInfo
    namespace: str | None
    name: str | None
    subresource: str | None


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
        # the kubelet-serving signer (node agents' certificates) and the TLS the API server
        # reaches node agents with (its client certificate, their CA)
        self.node_signer = node_signer
        self.node_tls = node_tls
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
        self.bookmark_interval = bookmark_interval
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
        # Extra authorization (tenancy): policy(cluster, user, attrs) -> why it is refused,
        # or None; and where a pod's logs are: target(cluster, ns, name) -> (cluster, ns,
        # name) of the pod that really runs, or None for the pod itself.
        self.request_policies: list[Callable[[str, User, Attributes], str | None]] = []
        self.log_targets: list[Callable[[str, str, str], tuple[str, str, str] | None]] = []

    # -- ASGI ------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
            return
        if scope["type"] != "http":
            return
        start = time.perf_counter()
        request = Request(scope, receive)
        verb, resource = request.method.lower(), ""
        try:
            response, verb, resource = await self.handle(request)
        except ApiError as e:
            response = json_response(e.status_body(), e.code)
        except ObjectTooLarge as e:
            err = ApiError(413, f"Request entity too large: {e}", "RequestEntityTooLarge")
            response = json_response(err.status_body(), 413)
        except StoreUnavailable as e:
            response = json_response(ApiError(503, str(e)).status_body(), 503)
        except Exception as e:  # an unexpected bug must still answer with a Status
            log.exception("internal error on %s %s", request.method, scope["path"])
            err = ApiError(500, f"internal error: {type(e).__name__}: {e}")
            response = json_response(err.status_body(), 500)
        if self.store.pending:
            try:
                await self.store.durable()  # acknowledge (or show) only committed writes
            except StoreUnavailable as e:
                response = json_response(ApiError(503, str(e)).status_body(), 503)
        await response(scope, receive, send)
        if verb != "watch":
            self.metrics.observe(verb, resource, response.status_code,
                                 time.perf_counter() - start)
        else:
            self.metrics.observe(verb, resource, response.status_code, 0.0)

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

    # -- routing ---------------------------------------------------------------------------

    async def handle(self, request: Request) -> tuple[Response, str, str]:
        path = request.scope["path"]
        cluster = DEFAULT_CLUSTER
        prefix = ""
        if path.startswith("/clusters/"):
            rest = path[len("/clusters/"):]
            cluster, _, tail = rest.partition("/")
            if not _CLUSTER_NAME.match(cluster) or len(cluster) > 63:
                raise bad_request(f"invalid logical cluster name {cluster!r}")
            prefix = f"/clusters/{cluster}"
            path = "/" + tail
        if len(path) > 1 and path.endswith("/"):
            path = path.rstrip("/")
        method = request.method
        if path in _PUBLIC:
            return self._public(path), "get", path
        if path == "/dashboard" or path.startswith("/dashboard/"):
            # static files only; the page reads everything through the API with its token
            return dashboard_response(path), "get", "dashboard"
        if path == "/metrics":
            return self._metrics(request, cluster), "get", path
        user = self._authenticate(request, cluster)
        REQUEST_USER.set(user)  # for admission: who is writing
        if cluster not in self.api.registries and not user.is_admin:
            # Only cluster admins bring a new logical cluster into being (by using it).
            raise ApiError(404, f'logical cluster "{cluster}" does not exist', "NotFound")
        if path.startswith("/metrics/"):
            return await self._telemetry_push(request, cluster, user, path), "put", "telemetry"
        parts = [p for p in path.split("/") if p]
        if not parts:
            return json_response({"paths": ["/api", "/api/v1", "/apis", "/healthz",
                                            "/metrics", "/openapi/v2", "/openapi/v3",
                                            "/version"]}), "get", "/"
        reg = self.api.registry(cluster)
        # Discovery and OpenAPI are readable by every authenticated user, as in Kubernetes.
        if parts[0] == "openapi":
            return self._openapi(request, cluster, parts, prefix), "get", "openapi"
        if parts[0] == "api":
            if len(parts) == 1:
                return self._discovery_root(request, cluster, core=True), "get", "discovery"
            if parts[1] != "v1":
                raise not_found("", "", path)
            if len(parts) == 2:
                return json_response(discovery.resource_list(reg, "", "v1")), "get", "discovery"
            group, version, rest = "", "v1", parts[2:]
        elif parts[0] == "apis":
            if len(parts) == 1:
                return self._discovery_root(request, cluster, core=False), "get", "discovery"
            group = parts[1]
            if group not in reg.versions:
                raise ApiError(404, "the server could not find the requested resource",
                               "NotFound")
            if len(parts) == 2:
                return json_response(discovery.api_group(reg, group)), "get", "discovery"
            version = parts[2]
            if version not in reg.versions[group]:
                raise ApiError(404, "the server could not find the requested resource",
                               "NotFound")
            if len(parts) == 3:
                return (json_response(discovery.resource_list(reg, group, version)), "get",
                        "discovery")
            rest = parts[3:]
        else:
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        rr = self._resource_request(cluster, group, version, rest, method)
        return await self._dispatch(request, cluster, user, rr)

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
            user = self._authenticate(request, cluster)
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

    def _authenticate(self, request: HTTPConnection, cluster: str) -> User:
        header = request.headers.get("authorization", "")
        user = None
        if header[:7].lower() == "bearer ":
            token = header[7:].strip()
            user = self.tokens.authenticate(token) or self.sa_tokens.authenticate(token)
        if user is None or not user.valid_in(cluster):
            raise ApiError(401, "Unauthorized", "Unauthorized")
        as_user = request.headers.get("impersonate-user")
        if as_user:
            if not user.is_admin:
                raise ApiError(403, f'users "{as_user}" is forbidden: User "{user.name}" cannot '
                                    "impersonate resource \"users\" in API group \"\"",
                               "Forbidden")
            groups = tuple(request.headers.getlist("impersonate-group"))
            user = User(as_user, (*groups, AUTHENTICATED), user.clusters)
        return user

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

    def _resource_request(self, cluster: str, group: str, version: str, rest: list[str],
                          method: str) -> ResourceRequest:
        reg = self.api.registry(cluster)
        ns: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            info = reg.get(group, version, rest[2])
            if (info is not None and info.namespaced) or (
                group == "" and rest[2] == "bindings"
            ):
                ns = rest[1]
                rest = rest[2:]
        resource = rest[0]
        if group == "" and resource == "bindings" and ns is not None and len(rest) == 1:
            pods = reg.get("", "v1", "pods")
            assert pods is not None
            return ResourceRequest(pods, ns, None, "bindings")
        info = reg.get(group, version, resource)
        if info is None:
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if len(rest) > 3 or (sub is not None and sub not in info.subresources):
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        if info.namespaced and ns is None and name is not None:
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        return ResourceRequest(info, ns, name, sub)

    # -- resource requests -------------------------------------------------------------------

    async def _dispatch(self, request: Request, cluster: str, user: User,
                        rr: ResourceRequest) -> tuple[Response, str, str]:
        info, ns, name, sub = rr.info, rr.namespace, rr.name, rr.subresource
        method = request.method
        query = dict(request.query_params)
        dry_run = bool(query.get("dryRun"))
        strictness = query.get("fieldValidation", "")
        manager = field_manager(query, request.headers.get("user-agent", ""))
        if sub == "bindings":
            verb, sub_rbac = "create", "binding"
        elif sub in nodeproxy.STREAM_SUBRESOURCES:
            verb, sub_rbac = "create", sub  # a WebSocket upgrade is a GET, but it acts
        elif method == "GET":
            if name is None:
                verb = "watch" if query.get("watch") in ("true", "1") else "list"
            else:
                verb = "get"
            sub_rbac = sub or ""
        else:
            verb = {"POST": "create", "PUT": "update", "PATCH": "patch",
                    "DELETE": "delete" if name else "deletecollection"}.get(method, "")
            if not verb:
                raise ApiError(405, f"method {method} is not allowed", "MethodNotAllowed")
            sub_rbac = sub or ""
        if name is None and verb in ("update", "patch"):
            raise ApiError(405, f"{method} is not supported on a collection; name the object",
                           "MethodNotAllowed")
        if info.resource in NON_TABULAR or sub == "token":
            refuse_table_only(request.headers.get("accept", ""))
        if info.resource == "selfsubjectaccessreviews":
            return await self._access_review(request, cluster, user), "create", info.resource
        if info.resource == "selfsubjectreviews":
            review = reviews.self_subject_review(await self._body(request, allow_empty=True),
                                                 user)
            return json_response(review, 201), "create", info.resource
        if info.resource == "subjectaccessreviews":
            if not self.authorizer.allowed(cluster, user, Attributes(
                    "create", info.group, info.resource, "", "", "")):
                raise forbidden(user.name, "create", info.group, info.resource, "", "")
            review = reviews.subject_access_review(await self._body(request),
                                                   self.authorizer, cluster)
            return json_response(review, 201), "create", info.resource
        if info.resource == "selfsubjectrulesreviews":
            review = reviews.self_subject_rules_review(await self._body(request), user,
                                                       self.authorizer, cluster)
            return json_response(review, 201), "create", info.resource
        if verb not in info.verbs:
            raise ApiError(405, f"{verb} is not supported on {info.resource}", "MethodNotAllowed")
        attrs = Attributes(verb, info.group, info.resource, sub_rbac, ns or "", name or "")
        if not self.authorizer.allowed(cluster, user, attrs):
            shown = f"{info.resource}/{sub_rbac}" if sub_rbac else info.resource
            raise forbidden(user.name, verb, info.group, shown, name or "", ns or "")
        for policy in self.request_policies:
            reason = policy(cluster, user, attrs)
            if reason:
                raise ApiError(403, reason, "Forbidden", {"name": name or "",
                                                          "kind": info.resource})
        if info.group == METRICS_GROUP:
            return resource_metrics_response(self.store, self.usage, cluster, info, ns, name,
                                             query), verb, info.resource
        metric_resource = f"{info.resource}/{sub}" if sub else info.resource
        gr = info.group_resource
        api = self.api

        if sub == "token" and gr == "serviceaccounts":
            if method != "POST":
                raise ApiError(405, "serviceaccounts/token only supports POST",
                               "MethodNotAllowed")
            assert name is not None
            body = await self._body(request, allow_empty=True)
            answer = self.sa_tokens.request(cluster, ns or "", name, body)
            return json_response(answer, 201), "create", metric_resource
        if gr == "authentication.k8s.io/tokenreviews":
            body = await self._body(request)
            token = ((body.get("spec") or {}).get("token") if isinstance(body, dict) else None)
            static = self.tokens.authenticate(token) if isinstance(token, str) and token \
                else None
            return json_response(token_review(self.sa_tokens, static, cluster, body), 201), \
                "create", metric_resource

        if sub == "bindings" or (sub == "binding" and method == "POST"):
            body = await self._body(request)
            pod_name = name or ((body or {}).get("metadata") or {}).get("name")
            if not pod_name:
                raise bad_request("the Binding must name the pod in metadata.name")
            api.bind(cluster, ns or "", pod_name, body)
            if isinstance(body, dict):
                body.setdefault("apiVersion", "v1")
                body.setdefault("kind", "Binding")
            return json_response(body, 201), "create", "pods/binding"
        if sub == "eviction":
            if method != "POST":
                raise ApiError(405, "eviction only supports POST", "MethodNotAllowed")
            assert name is not None
            body = await self._body(request)
            api.evict(cluster, info, ns or "", name, body)
            return (json_response({**status_success("pods", name), "code": 201}, 201),
                    "create", "pods/eviction")
        if sub == "log":
            assert name is not None
            return await self._logs(cluster, ns or "", name, query), "get", "pods/log"
        if sub in nodeproxy.STREAM_SUBRESOURCES:
            assert name is not None
            self._stream_target(cluster, ns or "", name, sub,
                                list(request.query_params.multi_items()))
            # the same checks as a WebSocket, so a client falling back from one learns why
            raise bad_request(f"pods/{sub} is served over WebSocket only (an Upgrade: "
                              "websocket request); SPDY upgrades are not supported")
        if sub == "scale":
            assert name is not None
            return await self._scale(request, cluster, info, ns or "", name, verb), verb, \
                metric_resource

        if verb == "get":
            assert name is not None
            obj = api.get(cluster, info, ns or "", name)
            return self._render(request, info, [obj], single=True), verb, metric_resource
        if verb == "list":
            return await self._list(request, cluster, info, ns, query), verb, metric_resource
        if verb == "watch":
            return await self._watch(request, cluster, info, ns, query), verb, metric_resource
        if verb == "create":
            if name is not None:
                raise ApiError(405, "POST to a named object is not supported",
                               "MethodNotAllowed")
            body = await self._body(request)
            obj = api.create(cluster, info, ns, body, dry_run=dry_run,
                             field_validation=strictness, manager=manager)
            return json_response(api.served(info, obj), 201), verb, metric_resource
        if verb == "update":
            assert name is not None
            body = await self._body(request)
            if sub == "finalize":
                sub = None
            elif sub == "approval":
                sub = "status"  # the approval conditions live in the status
            obj = api.update(cluster, info, ns or "", name, body, sub, dry_run=dry_run,
                             field_validation=strictness, manager=manager)
            if rr.subresource == "approval" and not dry_run:
                obj = self._after_approval(cluster, info, obj)
            return json_response(api.served(info, obj)), verb, metric_resource
        if verb == "patch":
            assert name is not None
            content_type = request.headers.get("content-type", "").split(";")[0].strip()
            body = await self._body(request, content_type)
            if sub == "approval":
                sub = "status"
            obj, created = api.patch(cluster, info, ns or "", name, content_type, body, sub,
                                     dry_run=dry_run, force=query.get("force") == "true",
                                     field_validation=strictness, manager=manager)
            if rr.subresource == "approval" and not dry_run:
                obj = self._after_approval(cluster, info, obj)
            return (json_response(api.served(info, obj), 201 if created else 200), verb,
                    metric_resource)
        if verb == "delete":
            assert name is not None
            body = await self._body(request, allow_empty=True)
            opts = DeleteOptions.parse(body, query)
            obj, removed = api.delete(cluster, info, ns or "", name, opts)
            if removed and gr != "pods":
                uid = obj["metadata"].get("uid", "")
                return (json_response(status_success(info.resource, name, uid, info.group)),
                        verb, metric_resource)
            return (json_response(api.served(info, obj), 200 if removed else 202), verb,
                    metric_resource)
        # deletecollection
        body = await self._body(request, allow_empty=True)
        opts = DeleteOptions.parse(body, query)
        items = self._select(cluster, info, ns, query)
        for obj in items:
            try:
                api.delete(cluster, info, obj["metadata"].get("namespace") or "",
                           obj["metadata"]["name"], opts)
            except ApiError as e:
                if e.code != 404:
                    raise
        return (json_response(self._list_body(info, items, {"resourceVersion":
                                                            str(self.store.rv)})),
                verb, metric_resource)

    async def _body(self, request: Request, content_type: str | None = None,
                    allow_empty: bool = False) -> Any:
        raw = await limits.read_body(request, self.max_body_bytes)
        if not raw:
            if allow_empty:
                return None
            raise bad_request("the request body is empty")
        ctype = content_type or request.headers.get("content-type", "").split(";")[0].strip()
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

    # -- reading -----------------------------------------------------------------------------

    def _select(self, cluster: str, info: ResourceInfo, ns: str | None,
                query: dict[str, str]) -> list[dict[str, Any]]:
        return select(self.store, cluster, info, ns, query)

    def _list_body(self, info: ResourceInfo, items: list[dict[str, Any]],
                   list_meta: dict[str, Any]) -> dict[str, Any]:
        if (info.crd and crds.has_defaults(info.schema)) or any(
                o.get("apiVersion") != info.api_version for o in items):
            items = [self.api.served(info, o) for o in items]
        return {"kind": info.list_kind, "apiVersion": info.api_version, "metadata": list_meta,
                "items": items}

    async def _list(self, request: Request, cluster: str, info: ResourceInfo, ns: str | None,
                    query: dict[str, str]) -> Response:
        requested, match = versions.list_request(query)
        if requested:
            # NotOlderThan (or none) and Exact both need a state the server has reached.
            await versions.wait_for(self.store, requested)
        rv = self.store.rv
        items = self._select(cluster, info, ns, query)
        if requested and match == versions.EXACT:
            items = self._exact(cluster, info, ns, query, items, requested)
            rv = requested
        items, list_meta = paginate(items, query, rv)
        return self._render(request, info, items, single=False, list_meta=list_meta)

    def _exact(self, cluster: str, info: ResourceInfo, ns: str | None, query: dict[str, str],
               items: list[dict[str, Any]], rv: int) -> list[dict[str, Any]]:
        labels = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector"), info.group_resource)
        scope = Watcher(cluster, info.group_resource, ns if info.namespaced else None,
                        labels, fields)
        return versions.objects_at(self.store, cluster, info.group_resource, items, rv,
                                   scope.matches)

    def _render(self, request: Request, info: ResourceInfo, items: list[dict[str, Any]],
                single: bool, list_meta: dict[str, Any] | None = None) -> Response:
        accept = request.headers.get("accept", "")
        if "as=Table" in accept and wants_table(accept):
            include = request.query_params.get("includeObject", "Metadata")
            meta = list_meta or {"resourceVersion": items[0]["metadata"]["resourceVersion"]}
            return json_response(tables.to_table(info, items, include, meta))
        if single:
            return json_response(self.api.served(info, items[0]))
        return json_response(self._list_body(info, items, list_meta or {}))

    async def _watch(self, request: Request, cluster: str, info: ResourceInfo,
                     ns: str | None, query: dict[str, str]) -> Response:
        gr = info.group_resource
        labels = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector"), gr)
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
        rv_param = query.get("resourceVersion") or ""
        watcher = Watcher(cluster, gr, ns if info.namespaced else None, labels, fields,
                          min_rv=self.store.rv)
        initial: list[tuple[str, dict[str, Any]]] = []
        accept = request.headers.get("accept", "")
        as_table = "as=Table" in accept and wants_table(accept)
        encode = self._table_encoder(info, request) if as_table else self._encoder(info)
        if send_initial == "true" or rv_param in ("", "0"):
            if send_initial != "false":
                initial = [("ADDED", o) for o in self._select(cluster, info, ns, query)]
        else:
            since = versions.parse_rv(rv_param)
            try:
                await versions.wait_for(self.store, since)
            except ApiError as e:  # too large: an ERROR event, as kube-apiserver's cache does
                return Response(encode_event("ERROR", e.status_body()), 200, media_type=JSON)
            watcher.min_rv = since
            events = self.store.events_since(since)
            if events is None:
                status = versions.too_old(since, self.store).status_body()
                body = encode_event("ERROR", status)
                return Response(body, 200, media_type=JSON)
            for event in events:
                if event.cluster == cluster and event.gr == gr:
                    watcher.offer(event)
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

    def _table_encoder(self, info: ResourceInfo, request: Request) -> Any:
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

    async def _scale(self, request: Request, cluster: str, info: ResourceInfo, ns: str,
                     name: str, verb: str) -> Response:
        if verb == "get":
            return json_response(self.api.get_scale(cluster, info, ns, name))
        if verb == "update":
            body = await self._body(request)
        elif verb == "patch":
            content_type = request.headers.get("content-type", "").split(";")[0].strip()
            patch = await self._body(request, content_type)
            current = self.api.get_scale(cluster, info, ns, name)
            if content_type == PATCH_JSON:
                body = json_patch(current, patch)
            else:
                body = merge_patch(current, patch)
        else:
            raise ApiError(405, f"{verb} is not supported on {info.resource}/scale",
                           "MethodNotAllowed")
        return json_response(self.api.set_scale(cluster, info, ns, name, body))

    # -- pods/log and access reviews ---------------------------------------------------------

    def _pod_on_node(self, cluster: str, ns: str, name: str, container_query: str | None
                     ) -> tuple[dict[str, Any], str, str, str, str, int]:
        """(pod, container, namespace, name) of the pod that really runs (a virtual
        cluster's pod runs as a host pod), and (host, port) of its node agent."""
        pod = self.store.get(cluster, "pods", ns, name)
        if pod is None:
            raise not_found("", "pods", name)
        container = nodeproxy.container_name(pod, container_query)
        for target in self.log_targets:
            elsewhere = target(cluster, ns, name)
            if elsewhere is not None:
                cluster, ns, name = elsewhere
                pod = self.store.get(cluster, "pods", ns, name)
                if pod is None:
                    raise not_found("", "pods", name)
                break
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name:
            raise bad_request(f'container "{container}" in pod "{name}" is waiting to start: '
                              "the pod is not scheduled yet")
        node = self.store.get(cluster, "nodes", "", node_name)
        if node is None:
            raise not_found("", "nodes", node_name)
        host, port = nodeproxy.agent_endpoint(node)
        return pod, container, ns, name, host, port

    def _node_tls(self) -> ssl.SSLContext:
        if self.node_tls is None:
            raise ApiError(503, "this API server has no client certificate for node agents",
                           "ServiceUnavailable")
        return self.node_tls

    async def _logs(self, cluster: str, ns: str, name: str, query: dict[str, str]) -> Response:
        _, container, ns, name, host, port = self._pod_on_node(cluster, ns, name,
                                                               query.get("container"))
        body = await nodeproxy.open_log_stream(self._node_tls(), host, port, ns, name,
                                               container, query)
        return StreamingResponse(body, 200, media_type="text/plain")

    def _stream_target(self, cluster: str, ns: str, name: str, sub: str,
                       query: list[tuple[str, str]]) -> tuple[str, int, str]:
        """(host, port, agent path) for `pods/exec|attach|portforward`, after the checks
        kube-apiserver makes (the pod runs, the container is one of its own)."""
        container_query = next((v for k, v in query if k == "container"), None)
        if sub == "portforward":
            container_query = container_query or self._first_container(cluster, ns, name)
        pod, container, ns, name, host, port = self._pod_on_node(cluster, ns, name,
                                                                 container_query)
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            raise bad_request(f"cannot {'exec into' if sub == 'exec' else sub} a container "
                              f"in a completed pod; current phase is {phase}")
        if sub == "exec" and not any(k == "command" for k, _ in query):
            raise bad_request("you must specify at least one command for the container")
        return host, port, nodeproxy.stream_path(sub, ns, name, container, query)

    def _first_container(self, cluster: str, ns: str, name: str) -> str | None:
        pod = self.store.get(cluster, "pods", ns, name) or {}
        containers = (pod.get("spec") or {}).get("containers") or []
        return str(containers[0].get("name")) if containers else None

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        """`pods/exec`, `pods/attach` and `pods/portforward` over WebSocket: authorized with
        RBAC (`create` on the subresource) and relayed to the pod's node agent."""
        message = await receive()
        if message["type"] != "websocket.connect":
            return
        connection = HTTPConnection(scope)
        start, resource = time.perf_counter(), "pods/stream"
        try:
            cluster, ns, name, sub = _stream_request(scope["path"])
            resource = f"pods/{sub}"
            user = self._authenticate(connection, cluster)
            attrs = Attributes("create", "", "pods", sub, ns, name)
            if not self.authorizer.allowed(cluster, user, attrs):
                raise forbidden(user.name, "create", "", f"pods/{sub}", name, ns)
            for policy in self.request_policies:
                reason = policy(cluster, user, attrs)
                if reason:
                    raise ApiError(403, reason, "Forbidden", {"name": name, "kind": "pods"})
            host, port, path = self._stream_target(
                cluster, ns, name, sub, list(connection.query_params.multi_items()))
            context = self._node_tls()
        except ApiError as e:
            await nodeproxy.reject(send, e)
            self.metrics.observe("create", resource, e.code, time.perf_counter() - start)
            return
        offered = [str(p) for p in scope.get("subprotocols") or ()] or [
            p.strip() for p in connection.headers.get("sec-websocket-protocol", "").split(",")
            if p.strip()]
        # counted when the stream opens; its length is the command's, not the server's
        self.metrics.observe("create", resource, 101, time.perf_counter() - start)
        await nodeproxy.relay(context, host, port, path, offered, receive, send)

    def _after_approval(self, cluster: str, info: ResourceInfo,
                        obj: dict[str, Any]) -> dict[str, Any]:
        if self.node_signer is None or info.resource != "certificatesigningrequests":
            return obj
        return self.node_signer.after_approval(self.api, cluster, info, obj)

    async def _access_review(self, request: Request, cluster: str, user: User) -> Response:
        body = await self._body(request)
        if not isinstance(body, dict):
            raise bad_request("the request body must be a SelfSubjectAccessReview")
        spec = body.get("spec") or {}
        ra = spec.get("resourceAttributes")
        allowed = False
        if isinstance(ra, dict):
            attrs = Attributes(ra.get("verb", ""), ra.get("group", ""), ra.get("resource", ""),
                               ra.get("subresource", ""), ra.get("namespace", ""),
                               ra.get("name", ""))
            allowed = self.authorizer.allowed(cluster, user, attrs) and not any(
                policy(cluster, user, attrs) for policy in self.request_policies)
        elif isinstance(spec.get("nonResourceAttributes"), dict):
            nra = spec["nonResourceAttributes"]
            allowed = self.authorizer.non_resource_allowed(cluster, user, nra.get("path", ""),
                                                           nra.get("verb", ""))
        body["status"] = {"allowed": allowed}
        body.setdefault("apiVersion", "authorization.k8s.io/v1")
        body.setdefault("kind", "SelfSubjectAccessReview")
        body.setdefault("metadata", {})
        return json_response(body, 201)
