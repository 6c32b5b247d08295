"""A thin JSON layer over the official Kubernetes client.

The controllers and the agent speak to the control plane only through the Kubernetes API,
with the official ``kubernetes`` client doing configuration (kubeconfig, tokens, TLS) and
transport. They work on plain dicts rather than the generated models: the models cost
a deserialisation pass per object, both sides touch only a few fields, and dicts keep
fields they do not know (annotations, status) intact.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import orjson
import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


class ApiError(Exception):
    """A non-2xx answer from the API server."""

    def __init__(self, status: int, reason: str, body: dict[str, Any] | None = None) -> None:
        message = (body or {}).get("message") or reason
        super().__init__(f"{status}: {message}")
        self.status = status
        self.reason = reason
        self.body = body or {}

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def gone(self) -> bool:
        return self.status == 410


@dataclass(frozen=True, slots=True)
class Resource:
    """Where a kind lives in the API: ``/api/v1`` + ``pods``, or a group version."""

    group_version: str  # "v1", "batch/v1", "scheduling.run.ai/v2"
    plural: str
    namespaced: bool

    def base(self) -> str:
        if "/" in self.group_version:
            return f"/apis/{self.group_version}"
        return f"/api/{self.group_version}"

    def collection(self, namespace: str | None = None) -> str:
        if self.namespaced and namespace:
            return f"{self.base()}/namespaces/{namespace}/{self.plural}"
        return f"{self.base()}/{self.plural}"

    def item(self, name: str, namespace: str | None = None, sub: str = "") -> str:
        """One object's path; an empty name is refused (its path would be the collection's,
        and a DELETE there removes them all)."""
        if not name:
            raise ValueError(f"{self.plural}: an object's path needs its metadata.name")
        path = f"{self.collection(namespace)}/{name}"
        return f"{path}/{sub}" if sub else path


PODS = Resource("v1", "pods", True)
SERVICES = Resource("v1", "services", True)
ENDPOINTS = Resource("v1", "endpoints", True)
ENDPOINTSLICES = Resource("discovery.k8s.io/v1", "endpointslices", True)
NODES = Resource("v1", "nodes", False)
EVENTS = Resource("v1", "events", True)
NAMESPACES = Resource("v1", "namespaces", False)
CONFIGMAPS = Resource("v1", "configmaps", True)
SECRETS = Resource("v1", "secrets", True)
LEASES = Resource("coordination.k8s.io/v1", "leases", True)
JOBS = Resource("batch/v1", "jobs", True)
CRONJOBS = Resource("batch/v1", "cronjobs", True)
DEPLOYMENTS = Resource("apps/v1", "deployments", True)
REPLICASETS = Resource("apps/v1", "replicasets", True)
REPLICATIONCONTROLLERS = Resource("v1", "replicationcontrollers", True)
STATEFULSETS = Resource("apps/v1", "statefulsets", True)
QUEUES = Resource("scheduling.run.ai/v2", "queues", False)
PODGROUPS = Resource("scheduling.run.ai/v2alpha2", "podgroups", True)
PRIORITY_CLASSES = Resource("scheduling.k8s.io/v1", "priorityclasses", False)

BY_KIND: dict[str, Resource] = {
    "Pod": PODS,
    "Node": NODES,
    "Job": JOBS,
    "CronJob": CRONJOBS,
    "Deployment": DEPLOYMENTS,
    "ReplicaSet": REPLICASETS,
    "ReplicationController": REPLICATIONCONTROLLERS,
    "StatefulSet": STATEFULSETS,
    "Queue": QUEUES,
    "PodGroup": PODGROUPS,
    "PriorityClass": PRIORITY_CLASSES,
}


class KubeClient:
    """JSON requests over the official client's configuration (auth, TLS) and urllib3 pool.

    The official client is kept for what it does once: reading the kubeconfig, the TLS
    context, the token and its refresh hook, and the connection pool. Each request skips
    its generic per-call layer (parameter sanitising, header negotiation, the stdlib JSON
    encoder, response wrapping): the body is encoded with orjson and sent straight through
    the pool with headers built once and renewed with the token.
    """

    def __init__(self, api_client: k8s_client.ApiClient) -> None:
        self.api_client = api_client
        self._auth = list(api_client.configuration.auth_settings().keys())
        self._headers_lock = threading.Lock()
        self._headers_at = float("-inf")
        self._headers: dict[str, dict[str, str]] = {}
        self._base_headers: dict[str, str] = {}
        self._auth_query: list[tuple[str, str]] = []

    @classmethod
    def from_kubeconfig(cls, path: str, pool_size: int = 64,
                        cluster: str | None = None) -> KubeClient:
        """From a kubeconfig file; ``""`` inside a pod: its ServiceAccount (in-cluster).
        ``cluster``: talk to that logical cluster (``<server>/clusters/<cluster>``) of the
        kubeconfig's server, also after the token refresh re-reads the kubeconfig."""
        configuration = k8s_client.Configuration()
        if path:
            k8s_config.load_kube_config(config_file=path, client_configuration=configuration)
        else:
            k8s_config.load_incluster_config(client_configuration=configuration)
        # One connection per concurrent request: the binder pool and the informers.
        configuration.connection_pool_maxsize = pool_size
        host = None
        if cluster is not None:
            base = str(configuration.host).split("/clusters/", 1)[0].rstrip("/")
            host = configuration.host = f"{base}/clusters/{cluster}"
        configuration.refresh_api_key_hook = _throttled(configuration.refresh_api_key_hook,
                                                        host)
        return cls(k8s_client.ApiClient(configuration))

    @property
    def host(self) -> str:
        return str(self.api_client.configuration.host)

    def close(self) -> None:
        self.api_client.close()

    # -- raw requests -------------------------------------------------------------------

    def _headers_for(self, content_type: str | None) -> dict[str, str]:
        """The headers of a request with this body type (None: no body), token included.

        Rebuilt every TOKEN_REFRESH_SECONDS, which is when the token may have changed.
        """
        now = time.monotonic()
        if now - self._headers_at >= TOKEN_REFRESH_SECONDS:
            with self._headers_lock:
                if now - self._headers_at >= TOKEN_REFRESH_SECONDS:
                    api = self.api_client
                    base: dict[str, str] = {"Accept": JSON, **api.default_headers}
                    if api.cookie:
                        base["Cookie"] = api.cookie
                    auth_query: list[tuple[str, str]] = []
                    api.update_params_for_auth(base, auth_query, self._auth, "", "GET", None)
                    self._headers = {}
                    self._base_headers = base
                    self._auth_query = auth_query
                    self._headers_at = now
        key = content_type or ""
        headers = self._headers.get(key)
        if headers is None:
            headers = dict(self._base_headers)
            if content_type:
                headers["Content-Type"] = content_type
            self._headers[key] = headers
        # urllib3 may add to the dict it is given: each request gets its own copy.
        return dict(headers)

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, Any]] | None = None,
        body: Any = None,
        content_type: str = JSON,
        timeout: float | tuple[float, float] | None = 30.0,
    ) -> Any:
        """Send one request; the raw urllib3 response, its body not yet read."""
        headers = self._headers_for(content_type if body is not None else None)
        url = self.api_client.configuration.host + path
        params = list(query or ()) + self._auth_query
        if params:
            url += "?" + urlencode([(k, _query_value(v)) for k, v in params], quote_via=quote)
        # bytes go as they are (Prometheus text to the control plane's metrics endpoint)
        payload = body if isinstance(body, bytes) or body is None else orjson.dumps(body)
        try:
            return self.api_client.rest_client.pool_manager.urlopen(
                method, url, body=payload, headers=headers, timeout=_timeout(timeout),
                preload_content=False,
            )
        except urllib3.exceptions.SSLError as error:
            raise ApiError(0, f"{type(error).__name__}: {error}") from error

    def request(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, Any]] | None = None,
        body: Any = None,
        content_type: str = JSON,
        timeout: float | None = 30.0,
    ) -> dict[str, Any]:
        response = self._send(
            method, path, query=query, body=body, content_type=content_type, timeout=timeout
        )
        data = response.data
        parsed: Any = None
        if data:
            with contextlib.suppress(orjson.JSONDecodeError):
                parsed = orjson.loads(data)
        if not 200 <= response.status <= 299:
            raise ApiError(
                response.status, str(response.reason), parsed if isinstance(parsed, dict) else None
            )
        return parsed if isinstance(parsed, dict) else {}

    # -- verbs --------------------------------------------------------------------------

    def get(self, path: str) -> dict[str, Any] | None:
        try:
            return self.request("GET", path)
        except ApiError as error:
            if error.not_found:
                return None
            raise

    def list(self, path: str, **query: Any) -> dict[str, Any]:
        return self.request("GET", path, query=list(query.items()))

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", path, body=body)

    def replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.request("PUT", path, body=body)

    def merge_patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self.request("PATCH", path, body=patch, content_type=MERGE_PATCH)

    def strategic_patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A strategic merge patch (built-in kinds only): lists such as ``conditions``
        merge by their key instead of being replaced."""
        return self.request("PATCH", path, body=patch, content_type=STRATEGIC_MERGE_PATCH)

    def delete(
        self,
        path: str,
        *,
        propagation: str | None = None,
        uid: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> dict[str, Any] | None:
        """Delete; ``None`` when the object is already gone."""
        options: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if propagation:
            options["propagationPolicy"] = propagation
        if uid:
            options["preconditions"] = {"uid": uid}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        try:
            return self.request("DELETE", path, body=options)
        except ApiError as error:
            if error.not_found:
                return None
            raise

    def watch(
        self,
        path: str,
        resource_version: str,
        *,
        timeout_seconds: int = 300,
        on_open: Any = None,
        field_selector: str | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Yield watch events (``{"type", "object"}``) from ``resource_version`` on.

        ``on_open`` receives a callable that aborts the stream from another thread.
        """
        query: list[tuple[str, Any]] = [
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", timeout_seconds),
        ]
        if field_selector:
            query.append(("fieldSelector", field_selector))
        response = self._send(
            "GET", path, query=query, timeout=(10.0, float(timeout_seconds) + 30.0)
        )
        raw = response
        if not 200 <= response.status <= 299:
            data = response.data
            body = None
            with contextlib.suppress(orjson.JSONDecodeError):
                body = orjson.loads(data) if data else None
            raise ApiError(response.status, str(response.reason), body)
        if on_open is not None:
            on_open(lambda: _abort(raw))
        pending = b""
        try:
            for chunk in raw.stream(None, decode_content=True):
                pending += chunk
                while True:
                    line, sep, rest = pending.partition(b"\n")
                    if not sep:
                        break
                    pending = rest
                    if line.strip():
                        yield orjson.loads(line)
        finally:
            with contextlib.suppress(Exception):
                raw.release_conn()


TOKEN_REFRESH_SECONDS = 30.0


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


_TIMEOUTS: dict[Any, urllib3.Timeout] = {}


def _timeout(timeout: float | tuple[float, float] | None) -> urllib3.Timeout | None:
    """A urllib3 timeout: a number bounds the whole request, a pair (connect, read)."""
    if not timeout:
        return None
    cached = _TIMEOUTS.get(timeout)
    if cached is None:
        if isinstance(timeout, tuple):
            cached = urllib3.Timeout(connect=timeout[0], read=timeout[1])
        else:
            cached = urllib3.Timeout(total=timeout)
        if len(_TIMEOUTS) < 64:
            _TIMEOUTS[timeout] = cached
    return cached


def _throttled(hook: Any, host: str | None = None) -> Any:
    """The loader's token-refresh hook, run at most every TOKEN_REFRESH_SECONDS.

    The hook re-reads the kubeconfig on every request (so exec/OIDC tokens stay fresh);
    that costs about a quarter of a millisecond of CPU per request, which at hundreds of
    requests a second is most of the client's own work. It also sets the server address
    from the kubeconfig again: ``host``, when given, is put back after it.
    """
    if hook is None:
        return None
    last = [float("-inf")]
    current = [hook]

    def refresh(configuration: Any) -> None:
        now = time.monotonic()
        if now - last[0] >= TOKEN_REFRESH_SECONDS:
            last[0] = now
            current[0](configuration)
            if host is not None:
                configuration.host = host
            # The loader's hook installs a fresh copy of itself each time it runs.
            installed = configuration.refresh_api_key_hook
            if installed is not refresh and installed is not None:
                current[0] = installed
            configuration.refresh_api_key_hook = refresh

    return refresh


def _abort(raw: Any) -> None:
    # shutdown() unblocks a reader in another thread; close() alone may not.
    with contextlib.suppress(Exception):
        raw.shutdown()
    with contextlib.suppress(Exception):
        raw.close()


def key_of(obj: dict[str, Any]) -> str:
    """``namespace/name`` (or ``name`` for cluster-scoped objects), as informers key them.
    Called per watch event: a dict walk, not `Meta.of` (about 1 µs more a call)."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    name = meta.get("name", "")
    return f"{namespace}/{name}" if namespace else name


class Stopper:
    """A shared stop flag with a wait that wakes up on stop."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def stop(self) -> None:
        self._event.set()

    @property
    def stopped(self) -> bool:
        return self._event.is_set()

    def wait(self, seconds: float) -> bool:
        return self._event.wait(seconds)

    @property
    def event(self) -> threading.Event:
        """The underlying event, for code that takes a ``threading.Event``."""
        return self._event
