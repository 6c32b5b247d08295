"""What a write must satisfy before it is stored, as Kubernetes' REST strategies and its
built-in admission plug-ins: the body's kind and version, its namespace, a generated name,
pod admission (ServiceAccount, priority), each kind's validation, CRD acceptance."""

from __future__ import annotations

import random
from typing import Any, Protocol

from gpushare.api import shapes
from gpushare.apiserver.auth import serviceaccounts
from gpushare.apiserver.errors import ApiError, Cause, bad_request, invalid, not_found
from gpushare.apiserver.objects import now_rfc3339
from gpushare.apiserver.registry import crds, quota, services
from gpushare.apiserver.resources import Registry, ResourceInfo
from gpushare.apiserver.schema import fieldvalidation, kind_rules, schemas, typecheck, validation
from gpushare.apiserver.storage.store import Store

CRD_GR = "apiextensions.k8s.io/customresourcedefinitions"
QUEUE_GR = "scheduling.run.ai/queues"
PRIORITYCLASS_GR = "scheduling.k8s.io/priorityclasses"
NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"


class _Stored(Protocol):
    store: Store

    def registry(self, cluster: str) -> Registry: ...


class WriteStrategy:
    """`Api`'s checks before a write (a mixin: `Api` holds the store and registries)."""

    @staticmethod
    def _prune(info: ResourceInfo, obj: dict[str, Any], field_validation: str,
               stored: dict[str, Any] | None = None) -> None:
        """Drop the fields the kind's schema does not declare (``schema/fieldvalidation.py``:
        400 under Strict, warnings under Warn), then apply a custom resource's schema
        defaults. `stored`: the object `obj` replaces (its unchanged fields are skipped)."""
        custom = crds.prune_unknown(obj, info.schema) if info.crd and info.schema else None
        fieldvalidation.prune(info, obj, field_validation, custom, stored)
        if info.crd and info.schema:
            crds.apply_defaults(obj, info.schema)

    def _check_type(self: _Stored, info: ResourceInfo, obj: dict[str, Any]) -> None:
        if not info.crd:  # a built-in kind's body as decoded: its fields' JSON types
            schema = schemas.kind_schema(info.group, info.version, info.kind)
            if schema is not None:
                typecheck.check_against(obj, schema, info.version, info.kind)
        kind = obj.get("kind")
        if kind and kind != info.kind:
            raise bad_request(f"the kind of the object ({kind}) does not match the resource "
                              f"({info.kind})")
        api_version = obj.get("apiVersion")
        if api_version and api_version != info.api_version:
            group = api_version.split("/", 1)[0] if "/" in api_version else ""
            if group != info.group:
                raise bad_request(f"the API version of the object ({api_version}) does not "
                                  f"match the resource ({info.api_version})")
        obj["kind"] = info.kind
        obj["apiVersion"] = info.api_version

    def _namespace_for_write(
        self: _Stored, cluster: str, info: ResourceInfo, ns: str | None, m: dict[str, Any]
    ) -> str:
        if not info.namespaced:
            m.pop("namespace", None)
            return ""
        body_ns = m.get("namespace")
        if body_ns and ns and body_ns != ns:
            raise bad_request("the namespace of the provided object does not match the "
                              "namespace sent on the request")
        ns = ns or body_ns
        if not ns:
            raise bad_request("a namespace is required for namespaced resources")
        m["namespace"] = ns
        nsobj = self.store.get(cluster, "namespaces", "", ns)
        if nsobj is None:
            raise not_found("", "namespaces", ns)
        if nsobj["metadata"].get("deletionTimestamp"):
            raise ApiError(403, f'{info.resource} "{m.get("name") or m.get("generateName", "")}"'
                                f" is forbidden: unable to create new content in namespace {ns}"
                                " because it is being terminated", "Forbidden",
                           {"name": m.get("name", ""), "kind": info.resource})
        return ns

    def _generate_name(self: _Stored, cluster: str, gr: str, ns: str, prefix: str) -> str:
        for _ in range(20):
            name = prefix + "".join(random.choices(NAME_CHARS, k=5))
            if self.store.get(cluster, gr, ns, name) is None:
                return name
        raise ApiError(409, f"could not generate a unique name from {prefix!r}", "AlreadyExists")

    def _admit(
        self: _Stored, cluster: str, info: ResourceInfo, obj: dict[str, Any],
        old: dict[str, Any] | None,
    ) -> None:
        if info.group_resource != "pods" or old is not None:
            return
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        serviceaccounts.admit_pod(self.store, cluster, obj,
                                  "".join(random.choices(NAME_CHARS, k=5)))
        class_name = spec.get("priorityClassName")
        if class_name:
            pc = self.store.get(cluster, PRIORITYCLASS_GR, "", class_name)
            if pc is None:
                raise ApiError(403, f'pods "{obj["metadata"]["name"]}" is forbidden: no '
                                    f"PriorityClass with name {class_name} was found",
                               "Forbidden", {"name": obj["metadata"]["name"], "kind": "pods"})
            spec["priority"] = pc.get("value", 0)
            spec["preemptionPolicy"] = pc.get("preemptionPolicy", "PreemptLowerPriority")
        elif "priority" not in spec:
            default = next((pc for pc in self.store.list(cluster, PRIORITYCLASS_GR)
                            if pc.get("globalDefault")), None)
            spec["priority"] = default.get("value", 0) if default else 0
            if default:
                spec["priorityClassName"] = default["metadata"]["name"]

    def _validate(
        self: _Stored, cluster: str, info: ResourceInfo, obj: dict[str, Any],
        old: dict[str, Any] | None,
    ) -> None:
        gr = info.group_resource
        causes: list[Cause] = []
        if gr == "pods":
            causes = validation.validate_pod(obj, old)
        elif gr in ("batch/jobs", "apps/deployments", "apps/replicasets"):
            causes = validation.validate_workload(gr, obj)
        elif gr == QUEUE_GR:
            def lookup(n: str) -> dict[str, Any] | None:
                return self.store.get(cluster, QUEUE_GR, "", n)
            if info.schema:
                crds.validate_against_schema(obj, info.schema, "", causes)
                causes = [Cause(c.field.lstrip("."), c.message, c.reason) for c in causes]
            typed = {c.field for c in causes}
            causes += [c for c in validation.validate_queue(obj, lookup) if c.field not in typed]
        elif gr == "scheduling.run.ai/podgroups":
            causes = validation.validate_podgroup(obj)
        elif gr == CRD_GR:
            causes = crds.validate_crd(obj)
        elif gr == PRIORITYCLASS_GR:
            causes = validation.validate_priority_class(obj)
        elif gr.startswith("rbac.authorization.k8s.io/"):
            causes = shapes.rbac_causes(gr, obj)
        elif gr in kind_rules.RULES:
            causes = kind_rules.RULES[gr](obj, old)
        elif gr == quota.QUOTA_GR:
            causes = quota.validate(obj, old)
        elif gr == "services":
            # Cluster IPs and node ports are unique across namespaces.
            causes = services.allocate(obj, old, self.store.list(cluster, "services"))
        named = {c.field for c in causes}
        causes += [c for c in shape_causes(gr, obj) if c.field not in named]
        if info.crd and info.schema and gr != QUEUE_GR:
            schema_causes: list[Cause] = []
            crds.validate_against_schema(obj, info.schema, "", schema_causes,
                                         old if old is not None else crds.MISSING)
            causes += [Cause(c.field.lstrip("."), c.message, c.reason) for c in schema_causes]
        if causes:
            raise invalid(info.group, info.kind, obj["metadata"]["name"], causes)

    def _accept_crd(self: _Stored, cluster: str, crd: dict[str, Any]) -> None:
        names = crd["spec"]["names"]
        group = crd["spec"]["group"]
        reg = self.registry(cluster)
        for (g, _v, r), info in reg.by_gvr.items():
            if g == group and r != names["plural"] and (
                info.kind == names["kind"] or names["plural"] in info.short_names
            ):
                raise invalid("apiextensions.k8s.io", "CustomResourceDefinition",
                              crd["metadata"]["name"], [Cause("spec.names.kind",
                                                              "already in use")])
        established = crds.established_status(crd, now_rfc3339())
        written = crd.get("status")
        if not isinstance(written, dict) or not written:
            crd["status"] = established
            return
        # An update keeps what the writer put in the status (other conditions, stored
        # versions a migration removed) and sets the server's own parts, as Kubernetes'
        # CRD controllers do: the accepted names, NamesAccepted and Established (their
        # transition times kept), and the current storage version among storedVersions.
        ours = {c["type"]: c for c in established["conditions"]}
        conditions = []
        for condition in written.get("conditions") or []:
            if not isinstance(condition, dict):
                continue
            mine = ours.pop(str(condition.get("type")), None)
            if mine is None:
                conditions.append(condition)
            elif condition.get("status") == mine["status"]:
                conditions.append({**mine, "lastTransitionTime": condition.get(
                    "lastTransitionTime", mine["lastTransitionTime"])})
            else:
                conditions.append(mine)
        conditions.extend(ours.values())
        stored = [v for v in written.get("storedVersions") or [] if isinstance(v, str)]
        for version in established["storedVersions"]:
            if version not in stored:
                stored.append(version)
        crd["status"] = {**written, "acceptedNames": established["acceptedNames"],
                         "storedVersions": stored, "conditions": conditions}


def schema_of(info: ResourceInfo) -> dict[str, Any] | None:
    """The schema field ownership follows: the built-in definition or the CRD's."""
    return info.schema if info.crd else builtin_schema_of(info)


def builtin_schema_of(info: ResourceInfo) -> dict[str, Any] | None:
    if info.storage_group_resource:  # stored in the core form
        return schemas.kind_schema("", "v1", info.kind)
    return None if info.crd else schemas.kind_schema(info.group, info.version, info.kind)


def shape_causes(gr: str, obj: dict[str, Any]) -> list[Cause]:
    """Shapes readers depend on that the kind's own validation above does not cover,
    checked for every write (status writes included)."""
    if gr == "pods":
        return shapes.pod_status_causes(obj.get("status"))
    if gr in ("apps/statefulsets", "apps/daemonsets"):
        spec = obj.get("spec")
        template = spec.get("template") if isinstance(spec, dict) else None
        tspec = template.get("spec") if isinstance(template, dict) else None
        return shapes.pod_spec_causes(tspec, "spec.template.spec") if isinstance(
            tspec, dict) else []
    if gr == CRD_GR:
        return shapes.crd_causes(obj)
    return []


def qualified(info: ResourceInfo) -> str:
    return f"{info.resource}.{info.group}" if info.group else info.resource

