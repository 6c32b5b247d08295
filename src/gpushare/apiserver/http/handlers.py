"""What a resource request does once it is let in: the table from (verb, subresource) to
handler, the resources answered rather than stored (reviews, token reviews, metrics.k8s.io)
and the writing verbs. The reading verbs are in `reads`, the node streams in `streams`."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from gpushare.apiserver.admission import mutating
from gpushare.apiserver.auth import reviews
from gpushare.apiserver.auth.access import Attributes, TokenFile
from gpushare.apiserver.auth.serviceaccounts import ServiceAccountTokens, token_review
from gpushare.apiserver.cooperative import Slicer
from gpushare.apiserver.errors import ApiError, bad_request, forbidden
from gpushare.apiserver.http.content import content_type, json_response, read_body
from gpushare.apiserver.http.pipeline import Filters, Handler, RequestContext
from gpushare.apiserver.http.reads import Reads
from gpushare.apiserver.http.streams import NodeStreams
from gpushare.apiserver.objects import status_success
from gpushare.apiserver.registry.api import PATCH_JSON, Api, DeleteOptions
from gpushare.apiserver.registry.certificates import NodeServingSigner
from gpushare.apiserver.schema import typecheck
from gpushare.apiserver.schema.patch import json_patch, merge_patch
from gpushare.apiserver.telemetry.pushes import ResourceUsage
from gpushare.apiserver.telemetry.resource_metrics import METRICS_GROUP, resource_metrics_response

ANY = "*"


class ResourceHandlers:
    def __init__(self, api: Api, filters: Filters, reads: Reads, streams: NodeStreams,
                 tokens: TokenFile, sa_tokens: ServiceAccountTokens, usage: ResourceUsage,
                 max_body_bytes: int, node_signer: NodeServingSigner | None) -> None:
        self.api = api
        self.filters = filters
        self.reads = reads
        self.streams = streams
        self.tokens = tokens
        self.sa_tokens = sa_tokens
        self.usage = usage
        self.max_body_bytes = max_body_bytes
        self.node_signer = node_signer
        #: (verb, subresource) → handler; ANY matches every verb or subresource
        self.table: dict[tuple[str, str], Handler] = {
            ("create", "bindings"): self.bind, ("create", "binding"): self.bind,
            (ANY, "eviction"): self.evict, (ANY, "log"): streams.logs,
            (ANY, "exec"): streams.not_upgraded, (ANY, "attach"): streams.not_upgraded,
            (ANY, "portforward"): streams.not_upgraded,
            (ANY, "scale"): self.scale, (ANY, "token"): self.token,
            ("get", ANY): reads.get_object, ("list", ANY): reads.list_objects,
            ("watch", ANY): reads.watch_objects,
            ("create", ANY): self.create, ("update", ANY): self.update,
            ("patch", ANY): self.patch, ("delete", ANY): self.delete,
            ("deletecollection", ANY): self.delete_collection,
        }
        #: resources whose objects are answers, by resource (reviews: before authorization)
        self.answers: dict[str, Handler] = {
            "selfsubjectaccessreviews": self.self_access_review,
            "selfsubjectreviews": self.self_review,
            "subjectaccessreviews": self.access_review,
            "selfsubjectrulesreviews": self.rules_review,
        }

    def route(self, ctx: RequestContext) -> Handler:
        """The handler of a resolved, authorized request."""
        target, verb, sub = ctx.resource, ctx.info.verb, ctx.info.subresource or ""
        ctx.metric_verb, ctx.metric_resource = verb, (
            f"{target.resource}/{sub}" if sub else target.resource)
        answer = self.answers.get(target.resource)
        if answer is not None:
            ctx.metric_verb, ctx.metric_resource = "create", target.resource
            return answer
        if target.group == METRICS_GROUP:
            ctx.metric_resource = target.resource
            return self.resource_metrics
        if target.group_resource == "authentication.k8s.io/tokenreviews":
            return self.token_review
        for key in ((verb, sub), (ANY, sub), (verb, ANY)):
            handler = self.table.get(key)
            if handler is not None:
                return handler
        raise ApiError(405, f"{verb} is not supported on {target.resource}", "MethodNotAllowed")

    async def body(self, ctx: RequestContext, ctype: str | None = None,
                   allow_empty: bool = False) -> Any:
        return await read_body(ctx.request, self.max_body_bytes, ctype, allow_empty)

    # -- answers -----------------------------------------------------------------------------

    async def self_access_review(self, ctx: RequestContext) -> Response:
        body = await self.body(ctx)
        if not isinstance(body, dict):
            raise bad_request("the request body must be a SelfSubjectAccessReview")
        typecheck.check(body, "authorization.k8s.io", "v1", "SelfSubjectAccessReview")
        spec = body.get("spec") or {}
        ra = spec.get("resourceAttributes")
        allowed = False
        cluster, user = ctx.info.cluster, ctx.user
        if isinstance(ra, dict):
            attrs = Attributes(ra.get("verb", ""), ra.get("group", ""), ra.get("resource", ""),
                               ra.get("subresource", ""), ra.get("namespace", ""),
                               ra.get("name", ""))
            allowed = self.filters.may(cluster, user, attrs)
        elif isinstance(spec.get("nonResourceAttributes"), dict):
            nra = spec["nonResourceAttributes"]
            allowed = self.filters.authorizer.non_resource_allowed(
                cluster, user, nra.get("path", ""), nra.get("verb", ""))
        body["status"] = {"allowed": allowed}
        body.setdefault("apiVersion", "authorization.k8s.io/v1")
        body.setdefault("kind", "SelfSubjectAccessReview")
        body.setdefault("metadata", {})
        return json_response(body, 201)

    async def self_review(self, ctx: RequestContext) -> Response:
        review = reviews.self_subject_review(await self.body(ctx, allow_empty=True), ctx.user)
        return json_response(review, 201)

    async def access_review(self, ctx: RequestContext) -> Response:
        info, user = ctx.resource, ctx.user
        if not self.filters.authorizer.allowed(ctx.info.cluster, user, Attributes(
                "create", info.group, info.resource, "", "", "")):
            raise forbidden(user.name, "create", info.group, info.resource, "", "")
        body = await self.body(ctx)
        typecheck.check(body, "authorization.k8s.io", "v1", "SubjectAccessReview")
        review = reviews.subject_access_review(body, self.filters.authorizer, ctx.info.cluster)
        return json_response(review, 201)

    async def rules_review(self, ctx: RequestContext) -> Response:
        body = await self.body(ctx)
        typecheck.check(body, "authorization.k8s.io", "v1", "SelfSubjectRulesReview")
        review = reviews.self_subject_rules_review(body, ctx.user,
                                                   self.filters.authorizer, ctx.info.cluster)
        return json_response(review, 201)

    async def resource_metrics(self, ctx: RequestContext) -> Response:
        return resource_metrics_response(self.api.store, self.usage, ctx.info.cluster,
                                         ctx.resource, ctx.info.namespace, ctx.info.name,
                                         ctx.query, list(self.streams.log_targets))

    async def token_review(self, ctx: RequestContext) -> Response:
        ctx.metric_verb = "create"
        body = await self.body(ctx)
        token = ((body.get("spec") or {}).get("token") if isinstance(body, dict) else None)
        static = self.tokens.authenticate(token) if isinstance(token, str) and token else None
        return json_response(token_review(self.sa_tokens, static, ctx.info.cluster, body), 201)

    # -- subresources ------------------------------------------------------------------------

    async def token(self, ctx: RequestContext) -> Response:
        if ctx.resource.group_resource != "serviceaccounts":
            return await self.table[(ctx.info.verb, ANY)](ctx)
        if ctx.info.method != "POST":
            raise ApiError(405, "serviceaccounts/token only supports POST", "MethodNotAllowed")
        ctx.metric_verb = "create"
        body = await self.body(ctx, allow_empty=True)
        answer = self.sa_tokens.request(ctx.info.cluster, ctx.ns, ctx.name, body)
        return json_response(answer, 201)

    async def bind(self, ctx: RequestContext) -> Response:
        ctx.metric_verb, ctx.metric_resource = "create", "pods/binding"
        body = await self.body(ctx)
        typecheck.check(body, "", "v1", "Binding")
        pod_name = ctx.info.name or ((body or {}).get("metadata") or {}).get("name")
        if not pod_name:
            raise bad_request("the Binding must name the pod in metadata.name")
        self.api.bind(ctx.info.cluster, ctx.ns, pod_name, body)
        if isinstance(body, dict):
            body.setdefault("apiVersion", "v1")
            body.setdefault("kind", "Binding")
        return json_response(body, 201)

    async def evict(self, ctx: RequestContext) -> Response:
        if ctx.info.method != "POST":
            raise ApiError(405, "eviction only supports POST", "MethodNotAllowed")
        ctx.metric_verb, ctx.metric_resource = "create", "pods/eviction"
        body = await self.body(ctx)
        typecheck.check(body, "policy", "v1", "Eviction")
        self.api.evict(ctx.info.cluster, ctx.resource, ctx.ns, ctx.name, body)
        return json_response({**status_success("pods", ctx.name), "code": 201}, 201)

    async def scale(self, ctx: RequestContext) -> Response:
        api, cluster, info, verb = self.api, ctx.info.cluster, ctx.resource, ctx.info.verb
        if verb == "get":
            return json_response(api.get_scale(cluster, info, ctx.ns, ctx.name))
        if verb == "update":
            body = await self.body(ctx)
        elif verb == "patch":
            ctype = content_type(ctx.request)
            patch = await self.body(ctx, ctype)
            current = api.get_scale(cluster, info, ctx.ns, ctx.name)
            body = json_patch(current, patch) if ctype == PATCH_JSON else merge_patch(current,
                                                                                     patch)
        else:
            raise ApiError(405, f"{verb} is not supported on {info.resource}/scale",
                           "MethodNotAllowed")
        return json_response(api.set_scale(cluster, info, ctx.ns, ctx.name, body))

    # -- writes ------------------------------------------------------------------------------

    @staticmethod
    def _write_options(ctx: RequestContext) -> dict[str, Any]:
        return {"dry_run": bool(ctx.query.get("dryRun")),
                "field_validation": ctx.query.get("fieldValidation", ""),
                "manager": ctx.manager}

    async def create(self, ctx: RequestContext) -> Response:
        options = self._write_options(ctx)
        if ctx.info.name is not None:
            raise ApiError(405, "POST to a named object is not supported", "MethodNotAllowed")
        body = await self.body(ctx)
        if isinstance(body, dict) and isinstance(body.get("metadata", {}), dict):
            if ctx.info.namespace and ctx.resource.namespaced:
                body.setdefault("metadata", {}).setdefault("namespace", ctx.info.namespace)
            body = await mutating.before_create(self.api, ctx.info.cluster, ctx.resource, body)
        obj = self.api.create(ctx.info.cluster, ctx.resource, ctx.info.namespace, body,
                              **options)
        return json_response(self.api.served(ctx.resource, obj), 201)

    async def update(self, ctx: RequestContext) -> Response:
        options = self._write_options(ctx)
        body = await self.body(ctx)
        sub = ctx.info.subresource
        if sub == "finalize":
            sub = None
        elif sub == "approval":
            sub = "status"  # the approval conditions live in the status
        obj = self.api.update(ctx.info.cluster, ctx.resource, ctx.ns, ctx.name, body, sub,
                              **options)
        obj = self._after_approval(ctx, obj, options["dry_run"])
        return json_response(self.api.served(ctx.resource, obj))

    async def patch(self, ctx: RequestContext) -> Response:
        options = self._write_options(ctx)
        ctype = content_type(ctx.request)
        body = await self.body(ctx, ctype)
        sub = "status" if ctx.info.subresource == "approval" else ctx.info.subresource
        obj, created = self.api.patch(ctx.info.cluster, ctx.resource, ctx.ns, ctx.name, ctype,
                                      body, sub, force=ctx.query.get("force") == "true",
                                      **options)
        obj = self._after_approval(ctx, obj, options["dry_run"])
        return json_response(self.api.served(ctx.resource, obj), 201 if created else 200)

    def _after_approval(self, ctx: RequestContext, obj: dict[str, Any],
                        dry_run: bool) -> dict[str, Any]:
        info = ctx.resource
        if (ctx.info.subresource != "approval" or dry_run or self.node_signer is None
                or info.resource != "certificatesigningrequests"):
            return obj
        return self.node_signer.after_approval(self.api, ctx.info.cluster, info, obj)

    async def delete(self, ctx: RequestContext) -> Response:
        info, name = ctx.resource, ctx.name
        body = await self.body(ctx, allow_empty=True)
        opts = DeleteOptions.parse(body, ctx.query)
        obj, removed = self.api.delete(ctx.info.cluster, info, ctx.ns, name, opts)
        if removed and info.group_resource != "pods":
            uid = obj["metadata"].get("uid", "")
            return json_response(status_success(info.resource, name, uid, info.group))
        return json_response(self.api.served(info, obj), 200 if removed else 202)

    async def delete_collection(self, ctx: RequestContext) -> Response:
        info = ctx.resource
        body = await self.body(ctx, allow_empty=True)
        opts = DeleteOptions.parse(body, ctx.query)
        items = self.reads.select(ctx)
        # one object at a time, the loop given back between slices: a tenant's
        # `delete --all` of thousands of objects holds nobody else up
        slicer = Slicer(self.reads.slice_s)
        for obj in items:
            try:
                self.api.delete(ctx.info.cluster, info, obj["metadata"].get("namespace") or "",
                                obj["metadata"]["name"], opts)
            except ApiError as e:
                if e.code != 404:
                    raise
            await slicer.pause()
        return await self.reads.list_response(info, items, {
            "resourceVersion": str(self.api.store.rv)})
