"""Mutating admission webhooks: for each create and update, every webhook of every
MutatingWebhookConfiguration whose rules and namespaceSelector match is sent an
AdmissionReview v1 over HTTPS (its server checked against the configuration's caBundle,
within its timeoutSeconds) and the JSONPatch it answers is applied to the object, in the
order of the configurations' names, then of their webhooks.

A webhook that cannot be reached or answers nonsense refuses the request under
``failurePolicy: Fail`` and is passed over under ``Ignore``; a webhook that answers
``allowed: false`` refuses it either way. Only the home cluster has webhooks: a tenant's
cluster refuses the configurations (they would have the API server reach any address).
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import logging
import socket
import ssl
import uuid
from contextvars import ContextVar
from typing import Any
from urllib.parse import urlsplit

import jsonpatch

from gpushare.apiserver.admission.webhook_config import (
    GR,
    MutatingWebhook,
    WebhookConfigError,
    parse_configuration,
)
from gpushare.apiserver.auth.access import ROOT_CLUSTER
from gpushare.apiserver.auth.privilege import REQUEST_USER
from gpushare.apiserver.errors import ApiError
from gpushare.apiserver.resources import ResourceInfo

log = logging.getLogger(__name__)
MAX_ANSWER = 3 * 1024 * 1024


class WebhookCallError(Exception):
    """A webhook that could not be called or whose answer cannot be used."""


def _target(api: Any, cluster: str, hook: MutatingWebhook) -> tuple[str, int, str, str]:
    """(address, port, path, TLS server name) of the webhook."""
    if hook.url:
        parts = urlsplit(hook.url)
        host = parts.hostname or ""
        return host, parts.port or 443, parts.path or "/", host
    assert hook.service is not None
    namespace, name, port, path = hook.service
    service = api.store.get(cluster, "services", namespace, name)
    if service is None:
        raise WebhookCallError(f"service {namespace}/{name} not found")
    address = (service.get("spec") or {}).get("clusterIP") or ""
    if not address or address == "None":
        raise WebhookCallError(f"service {namespace}/{name} has no cluster IP")
    return address, port, path, f"{name}.{namespace}.svc"


def _post(hook: MutatingWebhook, target: tuple[str, int, str, str], body: bytes) -> Any:
    host, port, path, server_name = target
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    if hook.ca_bundle:
        context = ssl.create_default_context(cadata=hook.ca_bundle.decode("ascii", "replace"))
    try:
        raw = socket.create_connection((host, port), timeout=hook.timeout_seconds)
        sock = context.wrap_socket(raw, server_hostname=server_name)
        conn = http.client.HTTPConnection(host, port, timeout=hook.timeout_seconds)
        conn.sock = sock
        try:
            conn.request("POST", path, body, {"Content-Type": "application/json",
                                              "Accept": "application/json"})
            answer = conn.getresponse()
            data = answer.read(MAX_ANSWER + 1)
        finally:
            conn.close()
    except (OSError, ssl.SSLError, http.client.HTTPException) as error:
        raise WebhookCallError(str(error) or type(error).__name__) from None
    if answer.status != 200:
        raise WebhookCallError(f"answered HTTP {answer.status}")
    if len(data) > MAX_ANSWER:
        raise WebhookCallError("answer too large")
    try:
        return json.loads(data)
    except ValueError:
        raise WebhookCallError("answer is not JSON") from None


def _review(info: ResourceInfo, operation: str, obj: dict[str, Any],
            old: dict[str, Any] | None) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    user = REQUEST_USER.get()
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()),
        "kind": {"group": info.group, "version": info.version, "kind": info.kind},
        "resource": {"group": info.group, "version": info.version, "resource": info.resource},
        "requestKind": {"group": info.group, "version": info.version, "kind": info.kind},
        "requestResource": {"group": info.group, "version": info.version,
                            "resource": info.resource},
        "name": meta.get("name", ""), "namespace": meta.get("namespace", ""),
        "operation": operation,
        "userInfo": {"username": user.name, "groups": list(user.groups)} if user else {},
        "object": obj, "oldObject": old, "dryRun": False,
    }}


def _patched(answer: Any, request_uid: str, obj: dict[str, Any]) -> dict[str, Any] | None:
    """The object with the answer's patch applied; None when the answer refuses it."""
    response = answer.get("response") if isinstance(answer, dict) else None
    if not isinstance(response, dict) or response.get("uid") != request_uid:
        raise WebhookCallError("answer is not an AdmissionReview for this request")
    if not response.get("allowed"):
        return None
    patch = response.get("patch")
    if not patch:
        return obj
    if response.get("patchType") != "JSONPatch":
        raise WebhookCallError("patchType must be JSONPatch")
    try:
        operations = json.loads(base64.b64decode(patch))
        return dict(jsonpatch.apply_patch(obj, operations))
    except (ValueError, jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as error:
        raise WebhookCallError(f"patch cannot be applied: {error}") from None


#: One matching webhook, its address resolved (or why it cannot be), ready to call.
Call = tuple[MutatingWebhook, "tuple[str, int, str, str] | WebhookCallError"]
#: Set while a create's webhooks were already called off the event loop (`called_before`).
_CALLED: ContextVar[bool] = ContextVar("gpushare_webhooks_called", default=False)


def matching(api: Any, cluster: str, info: ResourceInfo, obj: dict[str, Any],
             operation: str) -> list[Call]:
    """The webhooks to call for this write, in order, with their addresses (read from the
    store: call this on the event loop)."""
    if cluster != ROOT_CLUSTER or info.group_resource == GR:
        return []
    configurations = sorted(api.store.list(cluster, GR), key=lambda c: c["metadata"]["name"])
    if not configurations:
        return []
    ns = (obj.get("metadata") or {}).get("namespace") or ""
    labels: dict[str, str] = {}
    if ns:
        namespace = api.store.get(cluster, "namespaces", "", ns) or {}
        labels = (namespace.get("metadata") or {}).get("labels") or {}
    calls: list[Call] = []
    for configuration in configurations:
        for hook in parse_configuration(configuration):
            if not any(r.matches(operation, info.group, info.version, info.resource,
                                 info.namespaced) for r in hook.rules):
                continue
            if ns and not hook.selects_namespace(labels):
                continue
            try:
                calls.append((hook, _target(api, cluster, hook)))
            except WebhookCallError as error:
                calls.append((hook, error))
    return calls


def call_all(calls: list[Call], info: ResourceInfo, operation: str, obj: dict[str, Any],
             old: dict[str, Any] | None) -> dict[str, Any]:
    """Call each webhook in turn on the object the previous one answered; the object at the
    end. Network only (no store): safe off the event loop."""
    for hook, target in calls:
        review = _review(info, operation, obj, old)
        try:
            if isinstance(target, WebhookCallError):
                raise target
            answer = _post(hook, target, json.dumps(review).encode())
            patched = _patched(answer, review["request"]["uid"], obj)
        except WebhookCallError as error:
            if hook.fail_closed:
                raise ApiError(500, f'Internal error occurred: failed calling webhook '
                                    f'"{hook.name}": {error}', "InternalError") from None
            log.warning("webhook %s passed over (failurePolicy Ignore): %s", hook.name, error)
            continue
        if patched is None:
            status = (answer.get("response") or {}).get("status") or {}
            code = int(status.get("code") or 400)
            raise ApiError(code, f'admission webhook "{hook.name}" denied the request: '
                                 f'{status.get("message") or "denied"}',
                           "BadRequest" if code == 400 else "")
        obj = patched
    return obj


async def before_create(api: Any, cluster: str, info: ResourceInfo,
                        body: dict[str, Any]) -> dict[str, Any]:
    """A create's webhooks, called from the request handler in a worker thread so that the
    event loop serves other requests meanwhile; the body they answered. `Api.create` then
    does not call them again (`MutatingWebhooks` sees the mark this leaves)."""
    calls = matching(api, cluster, info, body, "CREATE")
    _CALLED.set(True)
    if not calls:
        return body
    return await asyncio.to_thread(call_all, calls, info, "CREATE", body, None)


class MutatingWebhooks:
    """`Api.admission_hooks` entry: checks MutatingWebhookConfigurations when written, and
    calls the webhooks of a write the handler did not call them for already (updates and
    patches: there the event loop waits for them, up to each one's timeoutSeconds)."""

    def __call__(self, api: Any, cluster: str, info: ResourceInfo, obj: dict[str, Any],
                 old: dict[str, Any] | None) -> None:
        if info.group_resource == GR:
            if cluster != ROOT_CLUSTER:
                # a tenant's webhook would have the API server reach any address it names
                raise ApiError(403, "mutatingwebhookconfigurations are served only in the "
                                    "home cluster, not in a tenant's", "Forbidden",
                               {"kind": "mutatingwebhookconfigurations"})
            self._check(obj)
            return
        if old is None and _CALLED.get():
            _CALLED.set(False)  # the mark is for this one create
            return
        operation = "CREATE" if old is None else "UPDATE"
        calls = matching(api, cluster, info, obj, operation)
        if calls:
            patched = call_all(calls, info, operation, obj, old)
            if patched is not obj:
                obj.clear()
                obj.update(patched)

    @staticmethod
    def _check(obj: dict[str, Any]) -> None:
        try:
            parse_configuration(obj)
        except WebhookConfigError as error:
            name = str((obj.get("metadata") or {}).get("name"))
            raise ApiError(422, f"MutatingWebhookConfiguration.admissionregistration.k8s.io "
                                f'"{name}" is invalid: {error}', "Invalid",
                           {"name": name, "kind": "MutatingWebhookConfiguration"}) from None
