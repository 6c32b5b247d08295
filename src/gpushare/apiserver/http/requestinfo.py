"""What a request asks for, read once from its method, path and query: `RequestInfo`.

As kube-apiserver's RequestInfoFactory, this is structural (no registry, no store): the
logical cluster of a ``/clusters/<name>`` prefix, whether the path names a resource
(``/api/v1/...``, ``/apis/<group>/<version>/...``), and if so its namespace, resource,
name, subresource and the Kubernetes verb. Everything after it reads this one value:
the filters (authentication, authorization, admission), the handler table, the metrics.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpushare.apiserver.errors import bad_request
from gpushare.apiserver.http import nodeproxy

ROOT_CLUSTER = "root"
_CLUSTER_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
#: Subresources of a Namespace itself (``/api/v1/namespaces/<name>/status``): the only
#: paths under ``namespaces/<name>/`` that do not name a namespaced resource.
NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
_METHOD_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


@dataclass(frozen=True, slots=True)
class RequestInfo:
    method: str
    #: the path without its cluster prefix and trailing slash ("/api/v1/pods")
    path: str
    cluster: str = ROOT_CLUSTER
    #: "/clusters/<cluster>" when the request named its cluster, else ""
    prefix: str = ""
    #: the path's segments ("api", "v1", "pods")
    parts: tuple[str, ...] = ()
    is_resource_request: bool = False
    #: the Kubernetes verb of a resource request ("" for a method the API does not take)
    verb: str = ""
    api_group: str = ""
    api_version: str = ""
    namespace: str | None = None
    resource: str = ""
    name: str | None = None
    subresource: str | None = None
    #: what a resource path has beyond `<resource>/<name>/<subresource>`: never served
    extra: tuple[str, ...] = ()
    watch: bool = False
    #: ``POST /api/v1/namespaces/<ns>/bindings``: the legacy Binding, `pods/binding`
    legacy_binding: bool = False

    @property
    def rbac_subresource(self) -> str:
        """The subresource RBAC sees: ``pods/binding`` for the legacy ``bindings``."""
        return "binding" if self.subresource == "bindings" else self.subresource or ""

    @property
    def metric_resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


def parse(method: str, raw_path: str, watch_param: str | None) -> RequestInfo:
    """The request's `RequestInfo`; 400 for an invalid logical cluster name."""
    path, cluster, prefix = raw_path, ROOT_CLUSTER, ""
    if path.startswith("/clusters/"):
        cluster, _, tail = path[len("/clusters/"):].partition("/")
        if not _CLUSTER_NAME.match(cluster) or len(cluster) > 63:
            raise bad_request(f"invalid logical cluster name {cluster!r}")
        prefix, path = f"/clusters/{cluster}", "/" + tail
    if len(path) > 1 and path.endswith("/"):
        path = path.rstrip("/")
    parts = tuple(p for p in path.split("/") if p)
    plain = RequestInfo(method, path, cluster, prefix, parts)
    if len(parts) >= 3 and parts[0] == "api" and parts[1] == "v1":
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 4 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return plain
    return _resource_info(plain, group, version, rest, watch_param in ("true", "1"))


def _resource_info(plain: RequestInfo, group: str, version: str, rest: tuple[str, ...],
                   watch: bool) -> RequestInfo:
    ns: str | None = None
    if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] not in NAMESPACE_SUBRESOURCES:
        ns, rest = rest[1], rest[2:]
    resource, name, sub, legacy = rest[0], None, None, False
    if len(rest) > 1:
        name = rest[1]
    if len(rest) > 2:
        sub = rest[2]
    if group == "" and resource == "bindings" and ns is not None and len(rest) == 1:
        resource, sub, legacy = "pods", "bindings", True  # pods/binding of the named pod
    return RequestInfo(
        plain.method, plain.path, plain.cluster, plain.prefix, plain.parts,
        is_resource_request=True, verb=_verb(plain.method, name, sub, watch),
        api_group=group, api_version=version, namespace=ns, resource=resource, name=name,
        subresource=sub, extra=rest[3:], watch=watch, legacy_binding=legacy)


def _verb(method: str, name: str | None, sub: str | None, watch: bool) -> str:
    if sub == "bindings" or sub in nodeproxy.STREAM_SUBRESOURCES:
        return "create"  # a WebSocket upgrade is a GET, but it acts
    if method == "GET":
        if name is None:
            return "watch" if watch else "list"
        return "get"
    if method == "DELETE":
        return "delete" if name else "deletecollection"
    return _METHOD_VERBS.get(method, "")
