"""The names tenancy owns: its API group, labels, annotations, and name translation."""

from __future__ import annotations

import hashlib

GROUP = "tenancy.gpushare.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "VirtualCluster"
PLURAL = "virtualclusters"
VC_GR = f"{GROUP}/{PLURAL}"
HOST_CLUSTER = "root"

FINALIZER = f"{GROUP}/cleanup"

# On host objects: whose they are.
TENANT_LABEL = f"{GROUP}/tenant"
TENANT_NAMESPACE_LABEL = f"{GROUP}/namespace"
TENANT_NAME_LABEL = f"{GROUP}/name"
TENANT_UID_ANNOTATION = f"{GROUP}/uid"
TENANT_OBJECT_ANNOTATION = f"{GROUP}/object"  # "namespace/name" of the tenant object
TENANT_OWNER_ANNOTATION = f"{GROUP}/owner"
# On tenant pods: the host pod they are synced to.
HOST_UID_ANNOTATION = f"{GROUP}/host-uid"
HOST_NAME_ANNOTATION = f"{GROUP}/host-name"
# On tenant objects the platform writes (nodes, queues): read-only views.
VIEW_LABEL = f"{GROUP}/view"

# On a tenant plane's copy of a VirtualCluster (tenancy/plane.py): the host is another server.
PLANE_ANNOTATION = f"{GROUP}/plane"
SEPARATE_PLANE = "separate"
HOST_NAMESPACE_PREFIX = "vc-"
MAX_TENANT_NAME = 63 - len(HOST_NAMESPACE_PREFIX)

# The syncer's own prefix is reserved: a tenant cannot forge it on its objects.
RESERVED_PREFIXES = (f"{GROUP}/",)


def host_namespace(tenant: str) -> str:
    """The host namespace that holds a tenant's pods."""
    return HOST_NAMESPACE_PREFIX + tenant


def tenant_of_namespace(namespace: str) -> str | None:
    if namespace.startswith(HOST_NAMESPACE_PREFIX):
        return namespace[len(HOST_NAMESPACE_PREFIX):] or None
    return None


def host_name(name: str, namespace: str, limit: int = 63) -> str:
    """A host name for tenant object ``namespace/name``: readable, with a hash of both
    parts, so that different tenant objects never map to the same host name (``a`` in
    ``b-c`` and ``a-b`` in ``c`` differ by their hash)."""
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:10]
    room = limit - len(digest) - 1
    base = f"{name}-{namespace}"[:room].rstrip("-.")
    return f"{base}-{digest}"


def admins_group(uid: str) -> str:
    """The group a tenant's admin token carries: tied to this VirtualCluster's uid, so a
    token of a deleted tenant gives nothing in a new tenant of the same name."""
    return f"{GROUP}:{uid}:admins"


def admin_user(tenant: str) -> str:
    return f"{tenant}-admin"
