"""What other parts of the product plug into the API server.

The server imports none of them: the process that composes the control plane (the CLI's
`gpushare apiserver` and `gpushare up`, through `gpushare.cli.compose`) passes
`ApiServer(..., plugins=[...])`, each a function of the server's `Api` that returns a
`ServerPlugin`. The server applies them once its own parts stand, in the order given.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.responses import Response

from gpushare.apiserver.auth.access import Attributes, User
from gpushare.apiserver.registry.api import Api
from gpushare.apiserver.resources import ResourceInfo
from gpushare.apiserver.storage.tenantquota import LimitsOf

#: `Api.admission_hooks` entry: hook(api, cluster, info, obj, old) runs before validation of
#: every create and update, may set defaults and raises `ApiError` to refuse.
AdmissionHook = Callable[[Api, str, ResourceInfo, dict[str, Any], "dict[str, Any] | None"],
                         None]
#: Extra authorization after RBAC: why (cluster, user, attributes) is refused, or None.
RequestPolicy = Callable[[str, User, Attributes], "str | None"]
#: Where a pod's logs and streams are: (cluster, ns, name) of the pod that really runs, or
#: None for the pod itself.
LogTarget = Callable[[str, str, str], "tuple[str, str, str] | None"]
#: An unauthenticated route: the response to a path under its prefix. It may raise
#: starlette's `HTTPException`, answered as a `Status` of that code.
Mount = Callable[[str], Response]


@dataclass(frozen=True)
class ServerPlugin:
    name: str
    admission: Sequence[AdmissionHook] = ()
    request_policies: Sequence[RequestPolicy] = ()
    log_targets: Sequence[LogTarget] = ()
    #: path prefix ("/dashboard") → route for the prefix and every path below it
    mounts: Mapping[str, Mount] = field(default_factory=dict)
    #: run once the plug-in's hooks are in place (e.g. to install its CRDs)
    on_start: Callable[[Api], None] | None = None
    #: the quota (objects, bytes) of the tenant a logical cluster serves, or None
    tenant_limits: LimitsOf | None = None


PluginFactory = Callable[[Api], ServerPlugin]
