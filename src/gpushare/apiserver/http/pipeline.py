"""One request's way through the server, as kube-apiserver's handler chain:

`RequestInfo` (parsed once) → [a tenant token's home cluster] → authenticate →
impersonate → [logical cluster exists] → resolve (the served resource, or 404/405/406) →
authorize (RBAC) → admission (the plug-ins' request policies) → the handler the (verb,
subresource) table names. Whatever any step raises becomes a `Status` through
`status_error`, the one exception → Status map.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from starlette.exceptions import HTTPException
from starlette.requests import HTTPConnection, Request
from starlette.responses import Response

from gpushare.apiserver.auth import homecluster
from gpushare.apiserver.auth.access import AUTHENTICATED, Attributes, Authorizer, TokenFile, User
from gpushare.apiserver.auth.serviceaccounts import ServiceAccountTokens
from gpushare.apiserver.errors import ApiError, forbidden
from gpushare.apiserver.http.content import field_manager
from gpushare.apiserver.http.requestinfo import RequestInfo
from gpushare.apiserver.registry.api import Api
from gpushare.apiserver.resources import ResourceInfo
from gpushare.apiserver.schema import fieldvalidation
from gpushare.apiserver.storage.store import ObjectTooLarge, StoreUnavailable

log = logging.getLogger(__name__)

#: A plug-in's extra authorization: why (cluster, user, attributes) is refused, or None.
RequestPolicy = Callable[[str, User, Attributes], "str | None"]
NOT_FOUND = "the server could not find the requested resource"
#: Answers about the caller itself: every authenticated user may ask (no RBAC check).
REVIEWS = frozenset({"selfsubjectaccessreviews", "selfsubjectreviews",
                     "subjectaccessreviews", "selfsubjectrulesreviews"})
#: Resources whose objects are answers, not stored objects with metadata: no Table form.
NON_TABULAR = REVIEWS | {"localsubjectaccessreviews", "tokenreviews"}


@dataclass(slots=True)
class RequestContext:
    """A request on its way: what it asks (`info`), who asks (`user`), what it reaches
    (`target`), and the labels its duration is recorded under."""

    request: Request
    info: RequestInfo
    query: dict[str, str]
    user: User = field(default_factory=lambda: User("", ()))
    target: ResourceInfo | None = None
    #: the field manager its writes are recorded under
    manager: str = ""
    metric_verb: str = ""
    metric_resource: str = ""

    @property
    def resource(self) -> ResourceInfo:
        assert self.target is not None, "resolved before any handler runs"
        return self.target

    @property
    def ns(self) -> str:
        return self.info.namespace or ""

    @property
    def name(self) -> str:
        assert self.info.name is not None, "the handler table sends only named requests here"
        return self.info.name

    def attributes(self) -> Attributes:
        info = self.info
        return Attributes(info.verb, self.resource.group, self.resource.resource,
                          info.rbac_subresource, self.ns, info.name or "")


Handler = Callable[[RequestContext], Awaitable[Response]]


def status_error(e: BaseException, where: str = "") -> ApiError:
    """The one exception → Status map: what the client is told about `e`."""
    if isinstance(e, ApiError):
        return e
    if isinstance(e, ObjectTooLarge):
        return ApiError(413, f"Request entity too large: {e}", "RequestEntityTooLarge")
    if isinstance(e, StoreUnavailable):
        return ApiError(503, str(e))
    if isinstance(e, HTTPException):  # a mounted plug-in's refusal
        return ApiError(e.status_code, e.detail)
    # an unexpected bug must still answer with a Status
    log.error("internal error on %s", where, exc_info=e)
    return ApiError(500, f"internal error: {type(e).__name__}: {e}")


class Filters:
    """The filters of the chain, in their order; each raises to refuse."""

    def __init__(self, api: Api, tokens: TokenFile, sa_tokens: ServiceAccountTokens,
                 authorizer: Authorizer) -> None:
        self.api = api
        self.tokens = tokens
        self.sa_tokens = sa_tokens
        self.authorizer = authorizer
        self.request_policies: list[RequestPolicy] = []

    # -- who asks ----------------------------------------------------------------------------

    def home(self, conn: HTTPConnection, info: RequestInfo) -> RequestInfo:
        """Before authentication: a request without a ``/clusters/<name>`` prefix whose token
        holds in exactly one tenant's cluster is served there (``auth/homecluster.py``), so
        a tenant's token never acts in the root cluster."""
        if info.prefix:
            return info
        home = homecluster.route(conn, self._user_of)
        return info if home is None else replace(info, cluster=home)

    def _user_of(self, token: str) -> User | None:
        return self.tokens.authenticate(token) or self.sa_tokens.authenticate(token)

    def identify(self, conn: HTTPConnection, cluster: str) -> User:
        """authenticate, then impersonate."""
        return self.impersonate(conn, self.authenticate(conn, cluster))

    def authenticate(self, conn: HTTPConnection, cluster: str) -> User:
        """A bearer token of the token file or a ServiceAccount token, valid in `cluster`."""
        header = conn.headers.get("authorization", "")
        user = None
        if header[:7].lower() == "bearer ":
            token = header[7:].strip()
            user = self._user_of(token)
        if user is None or not user.valid_in(cluster):
            raise ApiError(401, "Unauthorized", "Unauthorized")
        return user

    @staticmethod
    def impersonate(conn: HTTPConnection, user: User) -> User:
        """`Impersonate-User`/`-Group`: cluster admins only."""
        as_user = conn.headers.get("impersonate-user")
        if not as_user:
            return user
        if not user.is_admin:
            raise ApiError(403, f'users "{as_user}" is forbidden: User "{user.name}" cannot '
                                "impersonate resource \"users\" in API group \"\"", "Forbidden")
        groups = tuple(conn.headers.getlist("impersonate-group"))
        return User(as_user, (*groups, AUTHENTICATED), user.clusters)

    def cluster_exists(self, ctx: RequestContext) -> None:
        """Only cluster admins bring a new logical cluster into being (by using it)."""
        cluster = ctx.info.cluster
        if cluster not in self.api.registries and not ctx.user.is_admin:
            raise ApiError(404, f'logical cluster "{cluster}" does not exist', "NotFound")

    # -- what it reaches ---------------------------------------------------------------------

    def resolve(self, ctx: RequestContext) -> None:
        """The served resource of a resource request, or 404; then 405/406 for what the
        resource cannot answer."""
        info = ctx.info
        reg = self.api.registry(info.cluster)
        if info.api_group and info.api_version not in reg.versions.get(info.api_group, ()):
            raise ApiError(404, NOT_FOUND, "NotFound")
        target = reg.get(info.api_group, info.api_version, info.resource)
        legacy_binding = info.legacy_binding
        if target is None or info.extra or (
            info.subresource is not None and not legacy_binding
            and info.subresource not in target.subresources
        ) or (info.namespace is not None and not target.namespaced and not legacy_binding) or (
            target.namespaced and info.namespace is None and info.name is not None
        ):
            raise ApiError(404, NOT_FOUND, "NotFound")
        ctx.target = target
        ctx.manager = field_manager(ctx.query, ctx.request.headers.get("user-agent", ""))
        fieldvalidation.begin(ctx.query.get("fieldValidation", ""))  # 400 for a bad value
        if not info.verb:
            raise ApiError(405, f"method {info.method} is not allowed", "MethodNotAllowed")
        if info.name is None and info.verb in ("update", "patch"):
            raise ApiError(405, f"{info.method} is not supported on a collection; name the "
                                "object", "MethodNotAllowed")
        if target.resource in NON_TABULAR or info.subresource == "token":
            refuse_table_only(ctx.request.headers.get("accept", ""))
        if target.resource not in REVIEWS and info.verb not in target.verbs:
            raise ApiError(405, f"{info.verb} is not supported on {target.resource}",
                           "MethodNotAllowed")

    # -- whether it may ----------------------------------------------------------------------

    def authorize(self, ctx: RequestContext) -> None:
        """RBAC: the verb on the resource (and subresource) in the request's namespace."""
        if ctx.resource.resource in REVIEWS:
            return
        attrs = ctx.attributes()
        if not self.authorizer.allowed(ctx.info.cluster, ctx.user, attrs):
            shown = (f"{attrs.resource}/{attrs.subresource}" if attrs.subresource
                     else attrs.resource)
            raise forbidden(ctx.user.name, attrs.verb, attrs.group, shown, attrs.name,
                            attrs.namespace)

    def admit(self, ctx: RequestContext) -> None:
        """The plug-ins' request policies (e.g. a tenant's read-only views)."""
        if ctx.resource.resource in REVIEWS:
            return
        refusal = self.refusal(ctx.info.cluster, ctx.user, ctx.attributes())
        if refusal:
            raise ApiError(403, refusal, "Forbidden", {"name": ctx.info.name or "",
                                                       "kind": ctx.resource.resource})

    def refusal(self, cluster: str, user: User, attrs: Attributes) -> str | None:
        for policy in self.request_policies:
            reason = policy(cluster, user, attrs)
            if reason:
                return reason
        return None

    def may(self, cluster: str, user: User, attrs: Attributes) -> bool:
        """authorize and admit, as a question (access reviews, streams)."""
        return self.authorizer.allowed(cluster, user, attrs) and not any(
            policy(cluster, user, attrs) for policy in self.request_policies)


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
        if params[0] in ("application/json", "application/*", "*/*", "",
                         "application/vnd.kubernetes.protobuf", "application/yaml"):
            return
    raise ApiError(406, "the resource does not support the Table format: only the following "
                        "media types are accepted: application/json, application/yaml, "
                        "application/vnd.kubernetes.protobuf", "NotAcceptable")

