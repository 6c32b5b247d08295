"""What another part of the product plugs into the API server: the contract both sides
read, so that neither imports the other's code.

The server imports none of its plug-ins: the process that composes the control plane (the
CLI's `gpushare apiserver` and `gpushare up`, through `gpushare.cli.compose`) passes
`ApiServer(..., plugins=[...])`, each a function of the server (`ServerApi`) that returns a
`ServerPlugin`. The server applies them once its own parts stand, in the order given. A
hook refuses by raising `gpushare.api.status.ApiError`, answered as its `Status`.

Pure: protocols and data, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from starlette.responses import Response


class ObjectReader(Protocol):
    """The server's stored objects, read as they are (no copy is made: do not change them)."""

    def get(self, cluster: str, gr: str, ns: str, name: str) -> dict[str, Any] | None: ...

    def list(self, cluster: str, gr: str,
             ns: str | None = None) -> Iterable[dict[str, Any]]: ...


class ServerApi(Protocol):
    """What a plug-in sees of the server: its stored objects."""

    @property
    def store(self) -> ObjectReader: ...


class Resource(Protocol):
    """The resource a write is for."""

    @property
    def resource(self) -> str: ...  # plural, e.g. "pods"

    @property
    def group_resource(self) -> str: ...  # "pods", "batch/jobs"


class Caller(Protocol):
    """Who made a request."""

    @property
    def name(self) -> str: ...

    @property
    def is_admin(self) -> bool: ...  # in system:masters


class RequestAttributes(Protocol):
    """What a request asks to do, as RBAC sees it."""

    @property
    def verb(self) -> str: ...

    @property
    def group(self) -> str: ...

    @property
    def resource(self) -> str: ...

    @property
    def subresource(self) -> str: ...


#: hook(api, cluster, resource, obj, old) runs before validation of every create and
#: update, may set defaults and raises `ApiError` to refuse.
AdmissionHook = Callable[[ServerApi, str, Resource, dict[str, Any], "dict[str, Any] | None"],
                         None]
#: Extra authorization after RBAC: why (cluster, caller, attributes) is refused, or None.
RequestPolicy = Callable[[str, Caller, RequestAttributes], "str | None"]
#: Where a pod's logs and streams are: (cluster, ns, name) of the pod that really runs, or
#: None for the pod itself.
LogTarget = Callable[[str, str, str], "tuple[str, str, str] | None"]
#: An unauthenticated route: the response to a path under its prefix. It may raise
#: starlette's `HTTPException`, answered as a `Status` of that code.
Mount = Callable[[str], "Response"]


@dataclass(frozen=True)
class ServerPlugin:
    name: str
    admission: Sequence[AdmissionHook] = ()
    request_policies: Sequence[RequestPolicy] = ()
    log_targets: Sequence[LogTarget] = ()
    #: path prefix ("/dashboard") → route for the prefix and every path below it
    mounts: Mapping[str, Mount] = field(default_factory=dict)
    #: CRDs the server keeps installed in its root cluster as given: created when missing,
    #: replaced when their spec differs (a newer version ships another)
    crds: Sequence[dict[str, Any]] = ()


PluginFactory = Callable[[ServerApi], ServerPlugin]
