"""A tenant's token without the tenant's path prefix: served in the tenant's own cluster.

A tenant kubeconfig addresses its logical cluster by a path prefix
(``https://host:port/clusters/<tenant>``), but kubectl drops a server URL's path for
``kubectl get --raw /api/...`` (and some clients do the same for other absolute paths),
so such a request reaches the root paths with the tenant's token. A token issued for
exactly one logical cluster other than the host's (``clusters: [<tenant>]`` in
``tokens.yaml``: every tenant kubeconfig's) has that cluster as its home: a request
without a ``/clusters/<name>`` prefix is served there, as if it had the prefix. The token
still holds nowhere else: the host (root) cluster is never reachable with it, with or
without a prefix, and a prefix naming another cluster is refused (401) as before. A
ServiceAccount token holds in the one logical cluster it was requested in, so it has that
cluster as its home too (a tenant kubeconfig made from one: `gpushare tenant kubeconfig` on a
cluster whose tenants have an API server of their own).
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.requests import HTTPConnection

from gpushare.apiserver.auth.access import ROOT_CLUSTER, User


def home_cluster(user: User | None) -> str | None:
    """The one logical cluster `user`'s credentials hold in, unless it is the host's."""
    if user is None or user.clusters is None or len(user.clusters) != 1:
        return None
    only = user.clusters[0]
    if only.startswith("!") or only == ROOT_CLUSTER:
        return None
    return only


def route(request: HTTPConnection, authenticate: Callable[[str], User | None]) -> str | None:
    """The cluster an unprefixed request is for when its bearer token (as ``authenticate``
    knows it: the token file's, a ServiceAccount's) has a home."""
    header = request.headers.get("authorization", "")
    if header[:7].lower() != "bearer ":
        return None
    return home_cluster(authenticate(header[7:].strip()))
