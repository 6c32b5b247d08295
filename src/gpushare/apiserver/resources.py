"""What the API serves: one `ResourceInfo` per group/version/resource, per logical cluster."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(slots=True)
class PrinterColumn:
    name: str
    type: str
    json_path: str
    priority: int = 0
    description: str = ""
    format: str = ""


@dataclass(slots=True)
class ResourceInfo:
    group: str
    version: str
    resource: str  # plural
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    subresources: tuple[str, ...] = ()
    columns: tuple[PrinterColumn, ...] = ()
    schema: dict[str, Any] | None = None  # openAPI v3 schema of the whole object
    storage_version: str = ""  # the version objects are stored as
    crd: bool = False
    list_kind: str = ""
    # Top-level fields that are not spec-like: changing them does not bump generation.
    has_status: bool = False
    # Stored as another group's resource (events.k8s.io events are core events).
    storage_group_resource: str = ""

    def __post_init__(self) -> None:
        if not self.singular:
            self.singular = self.kind.lower()
        if not self.list_kind:
            self.list_kind = self.kind + "List"
        if not self.storage_version:
            self.storage_version = self.version
        self.has_status = "status" in self.subresources

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> str:
        """Storage key of the kind: objects of all versions of a group/resource share it."""
        if self.storage_group_resource:
            return self.storage_group_resource
        return f"{self.group}/{self.resource}" if self.group else self.resource


@dataclass
class Registry:
    """The resources of one logical cluster: the built-in ones plus its CRDs."""

    by_gvr: dict[tuple[str, str, str], ResourceInfo] = field(default_factory=dict)
    # group -> ordered versions (preferred first)
    versions: dict[str, list[str]] = field(default_factory=dict)
    # Bumped on every change, so that documents derived from the registry can be cached.
    revision: int = 0

    def add(self, info: ResourceInfo) -> None:
        self.revision += 1
        self.by_gvr[(info.group, info.version, info.resource)] = info
        versions = self.versions.setdefault(info.group, [])
        if info.version not in versions:
            versions.append(info.version)

    def remove_group_resource(self, group: str, resource: str) -> None:
        self.revision += 1
        for key in [k for k in self.by_gvr if k[0] == group and k[2] == resource]:
            del self.by_gvr[key]
        remaining = {v for (g, v, _r) in self.by_gvr if g == group}
        if remaining:
            self.versions[group] = [v for v in self.versions[group] if v in remaining]
        else:
            self.versions.pop(group, None)

    def get(self, group: str, version: str, resource: str) -> ResourceInfo | None:
        return self.by_gvr.get((group, version, resource))

    def in_group_version(self, group: str, version: str) -> list[ResourceInfo]:
        return [i for (g, v, _r), i in self.by_gvr.items() if g == group and v == version]

    def by_kind(self, group: str, kind: str) -> ResourceInfo | None:
        for (g, _v, _r), info in self.by_gvr.items():
            if g == group and info.kind == kind:
                return info
        return None

    def group_resources(self) -> dict[str, ResourceInfo]:
        """One info (the storage version) per group/resource."""
        out: dict[str, ResourceInfo] = {}
        for info in self.by_gvr.values():
            if info.version == info.storage_version and not info.storage_group_resource:
                out[info.group_resource] = info
        return out
