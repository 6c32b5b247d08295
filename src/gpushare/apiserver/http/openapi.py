"""OpenAPI documents (v3 per group/version, and a v2 document) generated from the registry.

Built-in kinds carry Kubernetes' own definitions (`schemas`, generated from the published
1.32 OpenAPI), with their patch strategies and merge keys, so `kubectl explain pod.spec`
works and clients see the same list semantics the server applies. Custom resources carry
their CRD schema (so `kubectl explain queue.spec` works) and say they take merge patches.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import logging
from typing import Any

import orjson

from gpushare.apiserver.resources import Registry, ResourceInfo
from gpushare.apiserver.schema import schemas

OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"

_PATCH_TYPES_CRD = ("application/json-patch+json", "application/merge-patch+json",
                    "application/apply-patch+yaml")
_PATCH_TYPES_BUILTIN = (*_PATCH_TYPES_CRD, "application/strategic-merge-patch+json")


log = logging.getLogger(__name__)


def schema_name(info: ResourceInfo) -> str:
    builtin = None if info.crd else schemas.definition_name(info.group, info.version, info.kind)
    if builtin:
        return builtin
    if info.crd:
        reversed_group = ".".join(reversed(info.group.split(".")))
        return f"{reversed_group}.{info.version}.{info.kind}"
    group = info.group.split(".")[0] if info.group else "core"
    return f"io.k8s.api.{group}.{info.version}.{info.kind}"


def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def _gvk(info: ResourceInfo) -> dict[str, str]:
    return {"group": info.group, "version": info.version, "kind": info.kind}


def _param(name: str, where: str = "query") -> dict[str, Any]:
    return {"name": name, "in": where, "schema": {"type": "string", "uniqueItems": True},
            **({"required": True} if where == "path" else {})}


def _ref(info: ResourceInfo) -> dict[str, Any]:
    if info.crd or schemas.definition_name(info.group, info.version, info.kind):
        return {"$ref": f"#/components/schemas/{schema_name(info)}"}
    return {"type": "object"}


def _builtin_names(infos: list[ResourceInfo]) -> list[str]:
    names = [schemas.definition_name(i.group, i.version, i.kind) for i in infos if not i.crd]
    return schemas.closure([OBJECT_META, *(n for n in names if n)])


def _op(info: ResourceInfo, action: str, body: tuple[str, ...] | None,
        params: list[dict[str, Any]]) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": f"{action}{info.kind}",
        "parameters": params,
        "responses": {"200": {"description": "OK", "content": {
            "application/json": {"schema": _ref(info)}}}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": _gvk(info),
    }
    if body is not None:
        op["requestBody"] = {"content": {t: {"schema": _ref(info)} for t in body},
                             "required": True}
    return op


def _paths(info: ResourceInfo) -> dict[str, Any]:
    base = "/" + _gv_path(info.group, info.version)
    write_params = [_param("dryRun"), _param("fieldManager"), _param("fieldValidation")]
    if info.namespaced:
        collection = f"{base}/namespaces/{{namespace}}/{info.resource}"
        path_params = [_param("namespace", "path")]
    else:
        collection = f"{base}/{info.resource}"
        path_params = []
    item = f"{collection}/{{name}}"
    patch_types = _PATCH_TYPES_CRD if info.crd else _PATCH_TYPES_BUILTIN
    item_params = [*path_params, _param("name", "path")]
    paths: dict[str, Any] = {
        collection: {
            "get": _op(info, "list", None, path_params),
            "post": _op(info, "post", ("application/json", "application/yaml"),
                        [*path_params, *write_params]),
            "delete": _op(info, "deletecollection", None, path_params),
        },
        item: {
            "get": _op(info, "get", None, item_params),
            "put": _op(info, "put", ("application/json", "application/yaml"),
                       [*item_params, *write_params]),
            "patch": _op(info, "patch", patch_types,
                         [*item_params, *write_params, _param("force")]),
            "delete": _op(info, "delete", None, item_params),
        },
    }
    if "status" in info.subresources:
        paths[f"{item}/status"] = {
            "get": _op(info, "get", None, item_params),
            "put": _op(info, "put", ("application/json",), [*item_params, *write_params]),
            "patch": _op(info, "patch", patch_types, [*item_params, *write_params]),
        }
    return paths


def _crd_schema(info: ResourceInfo) -> dict[str, Any]:
    try:
        return _crd_schema_of(info, info.schema)
    except Exception:  # a schema stored before validation: publish the kind schemaless
        log.exception("OpenAPI: the schema of %s (%s) cannot be published; served without one",
                      info.kind, info.group_resource)
        return _crd_schema_of(info, None)


def _crd_schema_of(info: ResourceInfo, stored: Any) -> dict[str, Any]:
    schema = dict(stored or {"type": "object", "x-kubernetes-preserve-unknown-fields": True})
    props = dict(schema.get("properties") or {})
    props["metadata"] = {"allOf": [{"$ref": f"#/components/schemas/{OBJECT_META}"}],
                         "description": "Standard object metadata."}
    props.setdefault("apiVersion", {"type": "string", "description": "Versioned schema of "
                                                                     "this representation."})
    props.setdefault("kind", {"type": "string", "description": "REST resource this object "
                                                               "represents."})
    schema["properties"] = props
    schema["x-kubernetes-group-version-kind"] = [_gvk(info)]
    return schema


class OpenApiCache:
    """Per logical cluster, documents rebuilt only when the registry changes."""

    def __init__(self) -> None:
        self._v3: dict[str, tuple[int, dict[str, bytes], dict[str, str]]] = {}
        self._v2: dict[str, tuple[int, bytes]] = {}

    def v3(self, cluster: str, reg: Registry) -> tuple[dict[str, bytes], dict[str, str]]:
        cached = self._v3.get(cluster)
        if cached is not None and cached[0] == reg.revision:
            return cached[1], cached[2]
        docs: dict[str, bytes] = {}
        hashes: dict[str, str] = {}
        for group, versions in reg.versions.items():
            for version in versions:
                infos = reg.in_group_version(group, version)
                paths: dict[str, Any] = {}
                comps: dict[str, Any] = {}
                for name in _builtin_names(infos):
                    comps[name] = _v3_definition(name)
                for info in infos:
                    paths.update(_paths(info))
                    if info.crd:
                        comps[schema_name(info)] = _crd_schema(info)
                doc = {"openapi": "3.0.0",
                       "info": {"title": "gpushare", "version": "v1.32.0"},
                       "paths": paths, "components": {"schemas": comps}}
                key = _gv_path(group, version)
                docs[key] = orjson.dumps(doc)
                hashes[key] = hashlib.sha256(docs[key]).hexdigest()[:32].upper()
        self._v3[cluster] = (reg.revision, docs, hashes)
        return docs, hashes

    def v3_root(self, cluster: str, reg: Registry, prefix: str) -> dict[str, Any]:
        _docs, hashes = self.v3(cluster, reg)
        return {"paths": {k: {"serverRelativeURL": f"{prefix}/openapi/v3/{k}?hash={h}"}
                          for k, h in hashes.items()}}

    def v2(self, cluster: str, reg: Registry) -> bytes:
        cached = self._v2.get(cluster)
        if cached is not None and cached[0] == reg.revision:
            return cached[1]
        definitions: dict[str, Any] = {}
        for name in _builtin_names(list(reg.by_gvr.values())):
            definitions[name] = _v2_definition(name)
        for info in reg.by_gvr.values():
            if info.crd:
                definitions[schema_name(info)] = _v2_crd_schema(info)
        doc = {"swagger": "2.0", "info": {"title": "gpushare", "version": "v1.32.0"},
               "paths": {}, "definitions": definitions}
        data = orjson.dumps(doc)
        self._v2[cluster] = (reg.revision, data)
        return data


def _v2_crd_schema(info: ResourceInfo) -> dict[str, Any]:
    """A CRD's OpenAPI v2 definition as Kubernetes publishes it for kubectl: a root that
    preserves unknown fields is a bare object (kubectl would otherwise refuse every field
    it does not know); otherwise the schema without what v2 cannot say (`_v2_node`)."""
    stored = info.schema if isinstance(info.schema, dict) else None
    if stored is None or stored.get("x-kubernetes-preserve-unknown-fields") is True:
        return {"type": "object", "x-kubernetes-group-version-kind": [_gvk(info)]}
    try:
        schema = _crd_schema_of(info, _v2_node(copy.deepcopy(stored)))
    except Exception:  # a schema stored before validation: publish the kind schemaless
        log.exception("OpenAPI v2: the schema of %s cannot be published", info.kind)
        return {"type": "object", "x-kubernetes-group-version-kind": [_gvk(info)]}
    schema["properties"]["metadata"] = {"$ref": f"#/definitions/{OBJECT_META}"}
    return schema


def _v2_node(node: Any) -> Any:
    """Kubernetes' v2 reduction of a structural schema, recursively: no allOf/oneOf/anyOf/
    not; a nullable node loses its type, items and properties; a node preserving unknown
    fields loses items and properties (and an object type); an array without items loses
    its type; nullable properties are not required."""
    if not isinstance(node, dict):
        return node
    for key in ("allOf", "oneOf", "anyOf", "not"):
        node.pop(key, None)
    if node.pop("nullable", False):
        for key in ("type", "items", "properties"):
            node.pop(key, None)
    if node.get("x-kubernetes-preserve-unknown-fields") is True:
        node.pop("items", None)
        node.pop("properties", None)
        if node.get("type") == "object":
            node.pop("type")
    if node.get("type") == "array" and "items" not in node:
        node.pop("type")
    props = node.get("properties")
    if isinstance(props, dict):
        nullable = {k for k, v in props.items() if isinstance(v, dict) and v.get("nullable")}
        for key in list(props):
            props[key] = _v2_node(props[key])
        if nullable and isinstance(node.get("required"), list):
            node["required"] = [r for r in node["required"] if r not in nullable]
            if not node["required"]:
                node.pop("required")
    if isinstance(node.get("items"), dict):
        node["items"] = _v2_node(node["items"])
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        if extra.get("nullable"):
            node.pop("required", None)
        node["additionalProperties"] = _v2_node(extra)
    return node


@functools.cache
def _v3_definition(name: str) -> dict[str, Any]:
    return schemas.with_refs(schemas.definitions()[name], "#/components/schemas/", wrap=True)


@functools.cache
def _v2_definition(name: str) -> dict[str, Any]:
    return schemas.with_refs(schemas.definitions()[name], "#/definitions/", wrap=False)
