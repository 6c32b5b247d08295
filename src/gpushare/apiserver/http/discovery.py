"""Discovery documents: legacy (/api, /apis, /apis/<g>/<v>) and aggregated (apidiscovery v2)."""

from __future__ import annotations

from typing import Any

from gpushare.apiserver.resources import Registry, ResourceInfo

AGGREGATED_V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
AGGREGATED_V2BETA1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"

_SUBRESOURCE_VERBS = {
    "status": ["get", "patch", "update"],
    "binding": ["create"],
    "eviction": ["create"],
    "log": ["get"],
    "exec": ["create", "get"],
    "attach": ["create", "get"],
    "portforward": ["create", "get"],
    "finalize": ["update"],
    "approval": ["get", "patch", "update"],
    "scale": ["get", "patch", "update"],
}
_SUBRESOURCE_KIND = {
    "binding": ("", "v1", "Binding"),
    "eviction": ("policy", "v1", "Eviction"),
    "log": ("", "v1", "Pod"),
    "exec": ("", "v1", "PodExecOptions"),
    "attach": ("", "v1", "PodAttachOptions"),
    "portforward": ("", "v1", "PodPortForwardOptions"),
    "scale": ("autoscaling", "v1", "Scale"),
}


def api_versions(server_address: str) -> dict[str, Any]:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                            "serverAddress": server_address}]}


def _group_versions(reg: Registry, group: str) -> list[dict[str, str]]:
    return [{"groupVersion": f"{group}/{v}", "version": v} for v in reg.versions.get(group, ())]


def api_group(reg: Registry, group: str) -> dict[str, Any]:
    versions = _group_versions(reg, group)
    return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": versions,
            "preferredVersion": versions[0]}


def api_group_list(reg: Registry) -> dict[str, Any]:
    return {"kind": "APIGroupList", "apiVersion": "v1",
            "groups": [api_group(reg, g) for g in reg.versions if g]}


def resource_list(reg: Registry, group: str, version: str) -> dict[str, Any]:
    resources: list[dict[str, Any]] = []
    for info in sorted(reg.in_group_version(group, version), key=lambda i: i.resource):
        entry: dict[str, Any] = {
            "name": info.resource, "singularName": info.singular,
            "namespaced": info.namespaced, "kind": info.kind, "verbs": list(info.verbs),
        }
        if info.short_names:
            entry["shortNames"] = list(info.short_names)
        if info.categories:
            entry["categories"] = list(info.categories)
        resources.append(entry)
        for sub in info.subresources:
            g, v, kind = _SUBRESOURCE_KIND.get(sub, (info.group, info.version, info.kind))
            sub_entry: dict[str, Any] = {"name": f"{info.resource}/{sub}", "singularName": "",
                                         "namespaced": info.namespaced, "kind": kind,
                                         "verbs": _SUBRESOURCE_VERBS.get(sub, ["get"])}
            if g != info.group or v != info.version:
                sub_entry["group"] = g
                sub_entry["version"] = v
            resources.append(sub_entry)
    if group == "" and version == "v1":
        resources.append({"name": "bindings", "singularName": "binding", "namespaced": True,
                          "kind": "Binding", "verbs": ["create"]})
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
            "resources": resources}


def _aggregated_resource(info: ResourceInfo) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "resource": info.resource,
        "responseKind": {"group": info.group, "version": info.version, "kind": info.kind},
        "scope": "Namespaced" if info.namespaced else "Cluster",
        "singularResource": info.singular,
        "verbs": list(info.verbs),
    }
    if info.short_names:
        entry["shortNames"] = list(info.short_names)
    if info.categories:
        entry["categories"] = list(info.categories)
    subs = []
    for sub in info.subresources:
        g, v, kind = _SUBRESOURCE_KIND.get(sub, (info.group, info.version, info.kind))
        subs.append({"subresource": sub, "responseKind": {"group": g, "version": v,
                                                          "kind": kind},
                     "verbs": _SUBRESOURCE_VERBS.get(sub, ["get"])})
    if subs:
        entry["subresources"] = subs
    return entry


def aggregated(reg: Registry, core: bool, api_version: str) -> dict[str, Any]:
    """APIGroupDiscoveryList: the core group for /api, all named groups for /apis."""
    items = []
    groups = [""] if core else [g for g in reg.versions if g]
    for group in groups:
        versions = []
        for version in reg.versions.get(group, ()):
            infos = sorted(reg.in_group_version(group, version), key=lambda i: i.resource)
            versions.append({"version": version,
                             "resources": [_aggregated_resource(i) for i in infos],
                             "freshness": "Current"})
        items.append({"metadata": {"name": group, "creationTimestamp": None},
                      "versions": versions})
    return {"kind": "APIGroupDiscoveryList", "apiVersion": api_version,
            "metadata": {}, "items": items}
