"""`pods/log`, `exec`, `attach` and `portforward`: found on the pod's node and relayed to
its agent (`nodeproxy`). A plug-in may say that a pod's logs are those of another pod (a
virtual cluster's pod runs as a host pod): `log_targets`."""

from __future__ import annotations

import re
import ssl
import time
from typing import Any

from starlette.requests import HTTPConnection
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from gpushare.api.plugins import LogTarget
from gpushare.apiserver.auth.access import Attributes
from gpushare.apiserver.errors import ApiError, bad_request, forbidden, not_found
from gpushare.apiserver.http import nodeproxy
from gpushare.apiserver.http.pipeline import Filters, RequestContext
from gpushare.apiserver.http.requestinfo import ROOT_CLUSTER
from gpushare.apiserver.storage.store import Store
from gpushare.apiserver.telemetry.metrics import Metrics

_STREAM_PATH = re.compile(
    r"^(?:/clusters/(?P<cluster>[a-z0-9][-a-z0-9]*))?/api/v1/namespaces/(?P<ns>[^/]+)/"
    r"pods/(?P<name>[^/]+)/(?P<sub>exec|attach|portforward)/?$")


def _stream_request(path: str) -> tuple[str, str, str, str]:
    """(cluster, namespace, pod, subresource) of a WebSocket request; 404 for any other."""
    match = _STREAM_PATH.match(path)
    if match is None:
        raise ApiError(404, "the server could not find the requested resource", "NotFound")
    return (match["cluster"] or ROOT_CLUSTER, match["ns"], match["name"], match["sub"])


class NodeStreams:
    def __init__(self, store: Store, filters: Filters, metrics: Metrics,
                 node_tls: ssl.SSLContext | None) -> None:
        self.store = store
        self.filters = filters
        self.metrics = metrics
        # the TLS the API server reaches node agents with (its client certificate, their CA)
        self.node_tls = node_tls
        self.log_targets: list[LogTarget] = []

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

    async def logs(self, ctx: RequestContext) -> Response:
        ctx.metric_verb, ctx.metric_resource = "get", "pods/log"
        _, container, ns, name, host, port = self._pod_on_node(
            ctx.info.cluster, ctx.ns, ctx.name, ctx.query.get("container"))
        body = await nodeproxy.open_log_stream(self._node_tls(), host, port, ns, name,
                                               container, ctx.query)
        return StreamingResponse(body, 200, media_type="text/plain")

    async def not_upgraded(self, ctx: RequestContext) -> Response:
        """A stream asked for without a WebSocket upgrade: the same checks as a WebSocket,
        so a client falling back from one learns why, then 400."""
        sub = ctx.info.subresource
        self._stream_target(ctx.info.cluster, ctx.ns, ctx.name, sub or "",
                            list(ctx.request.query_params.multi_items()))
        raise bad_request(f"pods/{sub} is served over WebSocket only (an Upgrade: "
                          "websocket request); SPDY upgrades are not supported")

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

    async def websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        """`pods/exec`, `pods/attach` and `pods/portforward` over WebSocket: the same
        filters as any request (`create` on the subresource) and relayed to the pod's node
        agent."""
        message = await receive()
        if message["type"] != "websocket.connect":
            return
        connection = HTTPConnection(scope)
        start, resource = time.perf_counter(), "pods/stream"
        try:
            cluster, ns, name, sub = _stream_request(scope["path"])
            resource = f"pods/{sub}"
            user = self.filters.identify(connection, cluster)
            attrs = Attributes("create", "", "pods", sub, ns, name)
            if not self.filters.authorizer.allowed(cluster, user, attrs):
                raise forbidden(user.name, "create", "", f"pods/{sub}", name, ns)
            reason = self.filters.refusal(cluster, user, attrs)
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
