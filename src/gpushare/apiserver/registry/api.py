"""The API's semantics, independent of HTTP: create, update, patch, delete, bind, evict.

Everything here runs on the server's event-loop thread, so the store needs no locks and a
read-modify-write (the optimistic-concurrency check and the write) is atomic.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpushare.api import shapes
from gpushare.apiserver.auth import serviceaccounts
from gpushare.apiserver.errors import ApiError, Cause, bad_request, conflict, invalid, not_found
from gpushare.apiserver.objects import deep_copy, meta, new_uid, now_rfc3339, rfc3339_after
from gpushare.apiserver.registry import builtin_kinds, crds, pods, quota
from gpushare.apiserver.registry.bootstrap import DEFAULT_CLUSTER, Bootstrap
from gpushare.apiserver.registry.eviction import take_disruption
from gpushare.apiserver.registry.strategy import (
    CRD_GR,
    QUEUE_GR,
    WriteStrategy,
    builtin_schema_of,
    qualified,
    schema_of,
)
from gpushare.apiserver.resources import Registry, ResourceInfo
from gpushare.apiserver.schema import conversions, managed, typecheck, validation
from gpushare.apiserver.schema.patch import json_patch, merge_patch, strategic_merge_patch
from gpushare.apiserver.storage.store import Store

log = logging.getLogger(__name__)

FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"

PATCH_MERGE = "application/merge-patch+json"
PATCH_JSON = "application/json-patch+json"
PATCH_STRATEGIC = "application/strategic-merge-patch+json"
PATCH_APPLY = "application/apply-patch+yaml"
PATCH_APPLY_CBOR = "application/apply-patch+cbor"


@dataclass
class DeleteOptions:
    grace_period: int | None = None
    propagation: str | None = None
    precondition_uid: str | None = None
    precondition_rv: str | None = None
    dry_run: bool = False

    @classmethod
    def parse(cls, body: Any, query: dict[str, str]) -> DeleteOptions:
        opts = cls()
        if body is not None:
            typecheck.check(body, "meta", "v1", "DeleteOptions")
        if isinstance(body, dict):
            if body.get("gracePeriodSeconds") is not None:
                opts.grace_period = int(body["gracePeriodSeconds"])
            opts.propagation = body.get("propagationPolicy")
            if opts.propagation is None and body.get("orphanDependents") is not None:
                opts.propagation = "Orphan" if body["orphanDependents"] else "Background"
            pre = body.get("preconditions") or {}
            opts.precondition_uid = pre.get("uid")
            opts.precondition_rv = pre.get("resourceVersion")
            opts.dry_run = bool(body.get("dryRun"))
        if "gracePeriodSeconds" in query:
            try:
                opts.grace_period = int(query["gracePeriodSeconds"])
            except ValueError as e:
                raise bad_request("gracePeriodSeconds must be an integer") from e
        if "propagationPolicy" in query:
            opts.propagation = query["propagationPolicy"]
        if query.get("dryRun"):
            opts.dry_run = True
        if opts.propagation not in (None, "Background", "Foreground", "Orphan"):
            raise bad_request(f"propagationPolicy {opts.propagation!r} is not supported: use "
                              "Background, Foreground or Orphan")
        return opts


@dataclass
class Api(Bootstrap, WriteStrategy):
    store: Store
    registries: dict[str, Registry] = field(default_factory=dict)
    # Work for the garbage collector: (cluster, uid) of removed owners, terminating namespaces,
    # objects waiting on the foregroundDeletion/orphan finalizers.
    gone_owners: list[tuple[str, str]] = field(default_factory=list)
    terminating_namespaces: set[tuple[str, str]] = field(default_factory=set)
    finalizing: set[tuple[str, str, str, str]] = field(default_factory=set)
    wake_gc: Callable[[], None] = lambda: None
    # Extra admission (tenancy): hook(api, cluster, info, obj, old) runs before validation
    # of every create and update and raises ApiError to refuse; it may set defaults.
    admission_hooks: list[Callable[..., None]] = field(default_factory=list)
    # The CA that serves the API, published in every namespace as ConfigMap kube-root-ca.crt.
    root_ca_pem: str = ""

    def __post_init__(self) -> None:
        for cluster in sorted(self.store.clusters() | {DEFAULT_CLUSTER}):
            self.registry(cluster)
        self._scan_pending_deletions()
        self.store.rollback_listeners.append(self._rolled_back)

    # -- logical clusters ------------------------------------------------------------------

    def registry(self, cluster: str) -> Registry:
        reg = self.registries.get(cluster)
        if reg is None:
            reg = self._build_registry(cluster)
            if self.store.get(cluster, "namespaces", "", "default") is None:
                self._bootstrap(cluster)
            if cluster == DEFAULT_CLUSTER:
                self._ensure_monitoring_role(reg)
        return reg

    def _build_registry(self, cluster: str) -> Registry:
        reg = Registry()
        for info in builtin_kinds.builtin_resources():
            reg.add(info)
        self.registries[cluster] = reg
        for crd in self.store.list(cluster, CRD_GR):
            try:
                infos = crds.crd_resource_infos(crd)
            except Exception:  # a CRD stored before validation: serve the others
                log.exception("skipping CustomResourceDefinition %r of cluster %s: it cannot "
                              "be served", (crd.get("metadata") or {}).get("name"), cluster)
                continue
            for info in infos:
                reg.add(info)
        return reg

    def _rolled_back(self, events: list[Any]) -> None:
        """A group commit failed and was undone: rebuild what was derived from it."""
        for cluster in {e.cluster for e in events if e.gr in (CRD_GR, "namespaces")}:
            if cluster in self.store.clusters():
                self._build_registry(cluster)
            else:  # the cluster's bootstrap itself was undone: it does not exist
                self.registries.pop(cluster, None)

    def _scan_pending_deletions(self) -> None:
        for cluster in self.registries:
            for ns in self.store.list(cluster, "namespaces"):
                if ns["metadata"].get("deletionTimestamp"):
                    self.terminating_namespaces.add((cluster, ns["metadata"]["name"]))
            for gr in self.registries[cluster].group_resources():
                for obj in self.store.list(cluster, gr):
                    m = obj["metadata"]
                    if m.get("deletionTimestamp") and {FOREGROUND, ORPHAN} & set(
                        f for f in m.get("finalizers") or () if isinstance(f, str)
                    ):
                        self.finalizing.add((cluster, gr, m.get("namespace") or "", m["name"]))

    # -- reads -----------------------------------------------------------------------------

    def get(self, cluster: str, info: ResourceInfo, ns: str, name: str) -> dict[str, Any]:
        obj = self.store.get(cluster, info.group_resource, ns if info.namespaced else "", name)
        if obj is None:
            raise not_found(info.group, info.resource, name)
        return self.served(info, obj)

    @staticmethod
    def served(info: ResourceInfo, obj: dict[str, Any]) -> dict[str, Any]:
        """The object as seen through `info`'s version (CRD versions convert with None;
        a custom resource stored before its schema declared a default gets it on read)."""
        if info.storage_group_resource:
            return conversions.from_storage(info, obj)
        if info.crd and info.schema:
            obj = crds.defaulted(obj, info.schema)
        if obj.get("apiVersion") != info.api_version:
            obj = dict(obj)
            obj["apiVersion"] = info.api_version
        return obj

    # -- create ----------------------------------------------------------------------------

    def create(
        self,
        cluster: str,
        info: ResourceInfo,
        ns: str | None,
        body: Any,
        *,
        dry_run: bool = False,
        field_validation: str = "",
        manager: str = "",
        applied: bool = False,
    ) -> dict[str, Any]:
        """Create `body`; `manager` (fieldManager) owns its fields, as an Apply if `applied`."""
        if not isinstance(body, dict):
            raise bad_request("the request body must be a JSON object")
        self._check_type(info, body)
        obj = conversions.to_storage(info, body)
        m = meta(obj)
        ns = self._namespace_for_write(cluster, info, ns, m)
        gr = info.group_resource
        if not m.get("name"):
            gen = m.get("generateName")
            if not gen:
                raise invalid(info.group, info.kind, "", [Cause(
                    "metadata.name", "Required value: name or generateName is required",
                    "FieldValueRequired")])
            m["name"] = self._generate_name(cluster, gr, ns, gen)
        name = m["name"]
        causes = validation.validate_name(gr, name) + shapes.metadata_causes(m)
        if causes:
            raise invalid(info.group, info.kind, str(name), causes)
        if self.store.get(cluster, gr, ns, name) is not None:
            raise ApiError(409, f'{qualified(info)} "{name}" already exists', "AlreadyExists",
                           {"name": name, "group": info.group, "kind": info.resource})
        for key in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds",
                    "selfLink", "managedFields"):
            m.pop(key, None)
        m["uid"] = new_uid()
        m["creationTimestamp"] = now_rfc3339()
        m["generation"] = 1
        if info.crd and info.has_status:
            obj.pop("status", None)
        self._prune(info, obj, field_validation)
        applied_tree = managed.fields_tree(obj, schema_of(info)) if manager and applied else None
        builtin_kinds.default_object(gr, obj)
        if manager:
            tree = applied_tree if applied_tree is not None else managed.fields_tree(
                obj, schema_of(info))
            m["managedFields"] = [{"manager": manager,
                                   "operation": "Apply" if applied else "Update",
                                   "apiVersion": info.api_version,
                                   "time": m["creationTimestamp"], "fieldsType": "FieldsV1",
                                   "fieldsV1": tree}]
        for hook in self.admission_hooks:
            hook(self, cluster, info, obj, None)
        self._admit(cluster, info, obj, None)
        self._validate(cluster, info, obj, None)
        if gr == CRD_GR:
            self._accept_crd(cluster, obj)
        if ns and self.store.count(cluster, quota.QUOTA_GR, ns):
            quota.admit(gr, obj, list(self.store.list(cluster, quota.QUOTA_GR, ns)),
                        lambda g: self.store.list(cluster, g, ns))
        if gr == quota.QUOTA_GR:
            obj["status"] = quota.status(obj, lambda g: self.store.list(cluster, g, ns))
        if dry_run:
            return obj
        self.store.put(cluster, gr, obj)
        self._after_write(cluster, info, obj, None)
        return obj

    # -- hooks -----------------------------------------------------------------------------

    def _refresh_quotas(self, cluster: str, gr: str, obj: dict[str, Any]) -> None:
        """Recompute `status.used` of the quotas of `obj`'s namespace that count its kind."""
        ns = obj["metadata"].get("namespace") or ""
        if not ns or not self.store.count(cluster, quota.QUOTA_GR, ns):
            return
        for q in list(self.store.list(cluster, quota.QUOTA_GR, ns)):
            hard = quota.hard_of(q)
            if gr != quota.QUOTA_GR and gr not in quota.counted_grs(hard):
                continue
            status = quota.status(q, lambda g: self.store.list(cluster, g, ns))
            if status != q.get("status"):
                self.store.put(cluster, quota.QUOTA_GR, {**q, "metadata": dict(q["metadata"]),
                                                         "status": status})

    def _after_write(
        self, cluster: str, info: ResourceInfo, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        gr = info.group_resource
        self._refresh_quotas(cluster, gr, obj)
        if gr == CRD_GR:
            reg = self.registry(cluster)
            spec = obj["spec"]
            reg.remove_group_resource(spec["group"], spec["names"]["plural"])
            for crd_info in crds.crd_resource_infos(obj):
                reg.add(crd_info)
        if old is None:
            # A dependent created after its owner was deleted is collected too.
            ns = obj["metadata"].get("namespace") or ""
            for ref in obj["metadata"].get("ownerReferences") or ():
                if ref.get("uid") and not self.owner_exists(cluster, ns, ref):
                    self.gone_owners.append((cluster, ref["uid"]))
                    self.wake_gc()
        if gr == "configmaps" and old is not None and \
                obj["metadata"]["name"] == serviceaccounts.ROOT_CA_CONFIGMAP:
            self.publish_root_ca(cluster, obj["metadata"].get("namespace") or "")
        if gr == "namespaces" and old is None:
            name = obj["metadata"]["name"]
            if self.store.get(cluster, "serviceaccounts", name, "default") is None:
                sa_info = self.registry(cluster).get("", "v1", "serviceaccounts")
                assert sa_info is not None
                self.create(cluster, sa_info, name, {"metadata": {"name": "default"}})
            self.publish_root_ca(cluster, name)

    def owner_exists(self, cluster: str, ns: str, ref: dict[str, Any]) -> bool:
        """Whether the owner a reference names exists (with that uid).

        An owner of a kind this cluster does not serve counts as existing: like Kubernetes'
        garbage collector, never delete on an owner it cannot resolve.
        """
        api_version = ref.get("apiVersion") or ""
        group = api_version.split("/", 1)[0] if "/" in api_version else ""
        info = self.registry(cluster).by_kind(group, ref.get("kind") or "")
        if info is None:
            return True
        owner = self.store.get(cluster, info.group_resource, ns if info.namespaced else "",
                               ref.get("name") or "")
        return owner is not None and owner["metadata"].get("uid") == ref.get("uid")

    def _after_delete(self, cluster: str, info: ResourceInfo, obj: dict[str, Any]) -> None:
        gr = info.group_resource
        self._refresh_quotas(cluster, gr, obj)
        if gr == CRD_GR:
            spec = obj["spec"]
            self.registry(cluster).remove_group_resource(spec["group"], spec["names"]["plural"])
            cr_gr = f"{spec['group']}/{spec['names']['plural']}"
            for cr in list(self.store.list(cluster, cr_gr)):
                self.store.delete(cluster, cr_gr, cr["metadata"].get("namespace") or "",
                                  cr["metadata"]["name"])
        uid = obj["metadata"].get("uid")
        if uid and self.store.dependents(cluster, uid):
            self.gone_owners.append((cluster, uid))
            self.wake_gc()
        if gr == "configmaps" and obj["metadata"]["name"] == serviceaccounts.ROOT_CA_CONFIGMAP:
            self.publish_root_ca(cluster, obj["metadata"].get("namespace") or "")

    # -- update ----------------------------------------------------------------------------

    def update(
        self,
        cluster: str,
        info: ResourceInfo,
        ns: str,
        name: str,
        body: Any,
        subresource: str | None = None,
        *,
        dry_run: bool = False,
        field_validation: str = "",
        manager: str = "",
    ) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise bad_request("the request body must be a JSON object")
        ns = ns if info.namespaced else ""
        gr = info.group_resource
        old = self.store.get(cluster, gr, ns, name)
        if old is None:
            raise not_found(info.group, info.resource, name)
        self._check_type(info, body)
        body = conversions.to_storage(info, body)
        m = meta(body)
        if m.get("name") and m["name"] != name:
            raise bad_request(f"the name of the object ({m['name']}) does not match the name on "
                              f"the URL ({name})")
        if info.namespaced and m.get("namespace") and m["namespace"] != ns:
            raise bad_request("the namespace of the provided object does not match the "
                              "namespace sent on the request")
        rv = m.get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise conflict(info.group, info.resource, name, "the object has been modified; "
                           "please apply your changes to the latest version and try again")
        return self._replace(cluster, info, old, body, subresource, dry_run=dry_run,
                             field_validation=field_validation, manager=manager)

    def _replace(
        self,
        cluster: str,
        info: ResourceInfo,
        old: dict[str, Any],
        new: dict[str, Any],
        subresource: str | None,
        *,
        dry_run: bool = False,
        field_validation: str = "",
        manager: str = "",
        applied: bool = False,
    ) -> dict[str, Any]:
        gr = info.group_resource
        old_meta = old["metadata"]
        schema = builtin_schema_of(info)
        # What the write left as stored (checked and pruned when it was written) is not
        # walked again; a stored form of another version is not compared.
        stored = None if info.storage_group_resource else old
        if schema is not None:  # as decoded: the JSON types of the fields this write sets
            # (a status write keeps the stored spec, so a spec stored malformed does not
            # stop the status that says why the pod waits)
            written = ({k: new.get(k) for k in ("metadata", "status")}
                       if subresource == "status" else new)
            typecheck.check_against(written, schema, info.version, info.kind, stored)
        self._prune(info, new, field_validation, stored)
        # managedFields a client wrote (changed from what is stored) are taken as given, as
        # Kubernetes does (kubectl moves client-side apply ownership that way).
        new_fields = (new.get("metadata") or {}).get("managedFields")
        base_fields = (new_fields if isinstance(new_fields, list)
                       and new_fields != old_meta.get("managedFields")
                       else old_meta.get("managedFields"))
        obj = _replacement(info, old, new, subresource, applied)
        obj["kind"] = info.kind
        obj["apiVersion"] = old.get("apiVersion", info.api_version)
        obj["metadata"]["resourceVersion"] = old_meta["resourceVersion"]
        builtin_kinds.default_object(gr, obj)
        if _spec_changed(old, obj, bool(info.crd)):
            obj["metadata"]["generation"] = int(old_meta.get("generation") or 1) + 1
        if manager and not applied:
            tracked = managed.track_update(old, obj, base_fields, schema_of(info), manager,
                                           info.api_version, now_rfc3339(), subresource)
            if tracked is not None:
                obj["metadata"]["managedFields"] = tracked
        elif base_fields is not old_meta.get("managedFields"):
            obj["metadata"]["managedFields"] = base_fields
        if not obj["metadata"].get("managedFields"):
            obj["metadata"].pop("managedFields", None)
        if obj == old:
            return old  # a no-op write keeps the resourceVersion, like Kubernetes
        for hook in self.admission_hooks:
            hook(self, cluster, info, obj, old)
        if subresource == "status" and gr == "pods":
            # As Kubernetes validates a pod status update: the status (and metadata), not the
            # spec it cannot change, so a pod stored malformed can still be told why.
            causes = shapes.pod_status_causes(obj.get("status"))
            if causes:
                raise invalid(info.group, info.kind, obj["metadata"]["name"], causes)
        else:
            self._validate(cluster, info, obj, old)
        if gr == CRD_GR:
            if obj["spec"].get("group") != old["spec"].get("group") or obj["spec"]["names"].get(
                    "plural") != old["spec"]["names"].get("plural"):
                raise invalid("apiextensions.k8s.io", "CustomResourceDefinition",
                              obj["metadata"]["name"],
                              [Cause("spec.group", "field is immutable")])
            self._accept_crd(cluster, obj)
        if dry_run:
            return obj
        m = obj["metadata"]
        if m.get("deletionTimestamp") and not m.get("finalizers") and not (
            gr == "pods" and _graceful_pending(old)
        ):
            return self._remove(cluster, info, obj)
        self.store.put(cluster, gr, obj)
        self._after_write(cluster, info, obj, old)
        return obj

    # -- patch -----------------------------------------------------------------------------

    def patch(
        self,
        cluster: str,
        info: ResourceInfo,
        ns: str,
        name: str,
        content_type: str,
        body: Any,
        subresource: str | None = None,
        *,
        dry_run: bool = False,
        force: bool = False,
        field_validation: str = "",
        manager: str = "",
    ) -> tuple[dict[str, Any], bool]:
        """Returns (object, created)."""
        ns = ns if info.namespaced else ""
        gr = info.group_resource
        old = self.store.get(cluster, gr, ns, name)
        apply = content_type in (PATCH_APPLY, PATCH_APPLY_CBOR)
        if old is None:
            if apply and subresource is None:
                if not isinstance(body, dict):
                    raise bad_request("an apply patch must be an object")
                m = meta(body)
                if m.get("name") and m["name"] != name:
                    raise bad_request("the name of the object does not match the URL")
                m["name"] = name
                if info.namespaced:
                    m["namespace"] = ns
                meta(body).pop("managedFields", None)
                return self.create(cluster, info, ns, body, dry_run=dry_run,
                                   field_validation=field_validation, manager=manager,
                                   applied=True), True
            raise not_found(info.group, info.resource, name)
        current = self.served(info, deep_copy(old))
        if content_type == PATCH_MERGE:
            patched = merge_patch(current, body)
        elif content_type == PATCH_JSON:
            patched = json_patch(current, body)
        elif content_type == PATCH_STRATEGIC:
            if info.crd:
                raise ApiError(415, "the body of the request was in an unknown format - "
                                    "accepted media types include: application/json-patch+json,"
                                    " application/merge-patch+json, application/apply-patch+yaml",
                               "UnsupportedMediaType")
            patched = strategic_merge_patch(current, body, builtin_schema_of(info))
        elif apply:
            if not isinstance(body, dict):
                raise bad_request("an apply patch must be an object")
            self._check_type(info, dict(body))
            config = {k: v for k, v in body.items() if k not in ("apiVersion", "kind")}
            if isinstance(config.get("metadata"), dict):
                config["metadata"] = {k: v for k, v in config["metadata"].items()
                                      if k != "managedFields"}
            builtin = builtin_schema_of(info)

            def merge(target: Any, cfg: Any) -> Any:
                return (merge_patch(target, cfg) if info.crd
                        else strategic_merge_patch(target, cfg, builtin))
            patched = managed.apply(current, config, schema_of(info), manager or "unknown",
                                    info.api_version, now_rfc3339(), force, subresource,
                                    merge, (info.group, info.resource, name))
        else:
            raise ApiError(415, f"the patch content type {content_type!r} is not supported",
                           "UnsupportedMediaType")
        if not isinstance(patched, dict):
            raise ApiError(422, "the patched object is not a JSON object", "Invalid")
        patched = conversions.to_storage(info, patched)
        pm = meta(patched)
        if pm.get("name") != name:
            raise bad_request("the patch may not change metadata.name")
        rv = pm.get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise conflict(info.group, info.resource, name, "the object has been modified; "
                           "please apply your changes to the latest version and try again")
        return self._replace(cluster, info, old, patched, subresource, dry_run=dry_run,
                             field_validation=field_validation, manager=manager,
                             applied=apply), False

    # -- delete ----------------------------------------------------------------------------

    def delete(
        self, cluster: str, info: ResourceInfo, ns: str, name: str, opts: DeleteOptions
    ) -> tuple[dict[str, Any], bool]:
        """Returns (object, removed_now)."""
        ns = ns if info.namespaced else ""
        gr = info.group_resource
        old = self.store.get(cluster, gr, ns, name)
        if old is None:
            raise not_found(info.group, info.resource, name)
        m_old = old["metadata"]
        if opts.precondition_uid and opts.precondition_uid != m_old.get("uid"):
            raise conflict(info.group, info.resource, name,
                           f"Precondition failed: UID in precondition: {opts.precondition_uid}, "
                           f"UID in object meta: {m_old.get('uid')}")
        if opts.precondition_rv and opts.precondition_rv != m_old.get("resourceVersion"):
            raise conflict(info.group, info.resource, name,
                           "Precondition failed: ResourceVersion in precondition: "
                           f"{opts.precondition_rv}, ResourceVersion in object meta: "
                           f"{m_old.get('resourceVersion')}")
        if gr == QUEUE_GR:
            children = sorted(q["metadata"]["name"] for q in self.store.list(cluster, QUEUE_GR)
                              if (q.get("spec") or {}).get("parentQueue") == name)
            if children:
                raise conflict(info.group, info.resource, name,
                               f"the queue has child queues ({', '.join(children)}); delete or "
                               "re-parent them first")
        if opts.dry_run:
            return old, False
        if gr == "namespaces":
            return self._delete_namespace(cluster, info, old), False
        obj = deep_copy(old)
        m = obj["metadata"]
        finalizers = list(m.get("finalizers") or ())
        has_dependents = bool(self.store.dependents(cluster, m_old.get("uid", "")))
        if opts.propagation == "Foreground" and has_dependents and FOREGROUND not in finalizers:
            finalizers.append(FOREGROUND)
        if opts.propagation == "Orphan" and has_dependents and ORPHAN not in finalizers:
            finalizers.append(ORPHAN)
        if gr == "pods":
            grace = opts.grace_period
            if grace is None:
                grace = int((obj.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
            phase = (obj.get("status") or {}).get("phase")
            bound = bool((obj.get("spec") or {}).get("nodeName"))
            if bound and grace > 0 and phase not in ("Succeeded", "Failed"):
                prev = m.get("deletionGracePeriodSeconds")
                if prev is None or grace < prev:
                    m["deletionTimestamp"] = rfc3339_after(grace)
                    m["deletionGracePeriodSeconds"] = grace
                m["finalizers"] = finalizers
                if not m["finalizers"]:
                    m.pop("finalizers")
                if obj == old:
                    return old, False
                self.store.put(cluster, gr, obj)
                self._note_finalizing(cluster, gr, obj)
                return obj, False
        if finalizers:
            if not m.get("deletionTimestamp"):
                m["deletionTimestamp"] = now_rfc3339()
            # No grace (left): the object goes as soon as its finalizers are removed.
            m["deletionGracePeriodSeconds"] = 0
            m["finalizers"] = finalizers
            if obj == old:
                return old, False
            self.store.put(cluster, gr, obj)
            self._note_finalizing(cluster, gr, obj)
            return obj, False
        return self._remove(cluster, info, obj), True

    def _note_finalizing(self, cluster: str, gr: str, obj: dict[str, Any]) -> None:
        m = obj["metadata"]
        if {FOREGROUND, ORPHAN} & {f for f in m.get("finalizers") or () if isinstance(f, str)}:
            self.finalizing.add((cluster, gr, m.get("namespace") or "", m["name"]))
            self.wake_gc()

    def _remove(self, cluster: str, info: ResourceInfo, obj: dict[str, Any]) -> dict[str, Any]:
        m = obj["metadata"]
        gone = self.store.delete(cluster, info.group_resource, m.get("namespace") or "",
                                 m["name"])
        assert gone is not None
        self._after_delete(cluster, info, gone)
        return gone

    def _delete_namespace(
        self, cluster: str, info: ResourceInfo, old: dict[str, Any]
    ) -> dict[str, Any]:
        if old["metadata"].get("deletionTimestamp"):
            return old
        obj = deep_copy(old)
        obj["metadata"]["deletionTimestamp"] = now_rfc3339()
        obj["metadata"]["deletionGracePeriodSeconds"] = 0
        obj.setdefault("status", {})["phase"] = "Terminating"
        self.store.put(cluster, "namespaces", obj)
        self.terminating_namespaces.add((cluster, obj["metadata"]["name"]))
        self.wake_gc()
        return obj

    # -- pods: binding and eviction ---------------------------------------------------------

    def bind(self, cluster: str, ns: str, name: str, binding: Any) -> dict[str, Any]:
        pod = self.store.get(cluster, "pods", ns, name)
        if pod is None:
            raise not_found("", "pods", name)
        obj = pods.bound(pod, binding, now_rfc3339())
        self.store.put(cluster, "pods", obj)
        return obj

    # -- scale -------------------------------------------------------------------------------

    def get_scale(self, cluster: str, info: ResourceInfo, ns: str, name: str) -> dict[str, Any]:
        return scale_of(self.get(cluster, info, ns, name))

    def set_scale(self, cluster: str, info: ResourceInfo, ns: str, name: str,
                  scale: Any) -> dict[str, Any]:
        """Write `spec.replicas` of the object from a (possibly patched) autoscaling/v1 Scale."""
        if not isinstance(scale, dict):
            raise bad_request("the request body must be a Scale")
        typecheck.check(scale, "autoscaling", "v1", "Scale")
        replicas = (scale.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise invalid("autoscaling", "Scale", name, [Cause(
                "spec.replicas", f"Invalid value: {replicas!r}: must be a non-negative integer")])
        obj = deep_copy(self.get(cluster, info, ns, name))
        rv = (scale.get("metadata") or {}).get("resourceVersion")
        if rv and rv != obj["metadata"]["resourceVersion"]:
            raise conflict(info.group, info.resource, name, "the object has been modified; "
                           "please apply your changes to the latest version and try again")
        obj.setdefault("spec", {})["replicas"] = replicas
        return scale_of(self.update(cluster, info, ns, name, obj))

    def evict(self, cluster: str, info: ResourceInfo, ns: str, name: str,
              eviction: Any) -> None:
        opts = DeleteOptions.parse((eviction or {}).get("deleteOptions")
                                   if isinstance(eviction, dict) else None, {})
        pod = self.store.get(cluster, info.group_resource, ns, name)
        if pod is not None:  # its PodDisruptionBudget first (eviction.py)
            take_disruption(self, cluster, pod, opts.dry_run)
        self.delete(cluster, info, ns, name, opts)


def scale_of(obj: dict[str, Any]) -> dict[str, Any]:
    """The autoscaling/v1 Scale view of a workload."""
    m = obj["metadata"]
    selector = (obj.get("spec") or {}).get("selector") or {}
    if "matchLabels" in selector or "matchExpressions" in selector:
        selector = selector.get("matchLabels") or {}  # a ReplicationController's is a map
    return {
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {k: m[k] for k in ("name", "namespace", "uid", "resourceVersion",
                                       "creationTimestamp") if k in m},
        "spec": {"replicas": (obj.get("spec") or {}).get("replicas", 0)},
        "status": {"replicas": (obj.get("status") or {}).get("replicas", 0),
                   "selector": ",".join(f"{k}={v}" for k, v in sorted(selector.items()))},
    }


def _replacement(info: ResourceInfo, old: dict[str, Any], new: dict[str, Any],
                 subresource: str | None, applied: bool) -> dict[str, Any]:
    """What replaces `old`: its status from `new` (a status write), or `new` with what a
    writer cannot change carried over from `old`."""
    old_meta = old["metadata"]
    if subresource == "status":
        # (the stored status is replaced: not copied; its key keeps its place)
        obj = deep_copy({k: None if k == "status" else v for k, v in old.items()})
        obj["status"] = new.get("status")
        if obj["status"] is None:
            obj.pop("status")
        _status_write_metadata(info, obj, new)
        return obj
    obj = new
    m = meta(obj)
    for key in ("uid", "creationTimestamp", "namespace", "name", "deletionTimestamp",
                "deletionGracePeriodSeconds", "generation"):
        if key in old_meta:
            m[key] = old_meta[key]
        else:
            m.pop(key, None)
    if not applied:
        m.pop("managedFields", None)
        if "managedFields" in old_meta:
            m["managedFields"] = old_meta["managedFields"]
    if info.has_status:
        if "status" in old:
            obj["status"] = deep_copy(old["status"])
        else:
            obj.pop("status", None)
    causes = shapes.metadata_causes(m)
    if causes:
        raise invalid(info.group, info.kind, m["name"], causes)
    return obj


#: Metadata a status write changes on built-in kinds, as Kubernetes' status strategies
#: let it (custom resources' status writes change only the status; pods' keep their
#: metadata here, so that the GPU slot annotations stay the binder's).
_STATUS_METADATA = ("labels", "annotations")
_STATUS_KEEPS_LABELS = frozenset({"apps/deployments"})


def _status_write_metadata(info: ResourceInfo, obj: dict[str, Any],
                           new: dict[str, Any]) -> None:
    if info.crd or info.group_resource == "pods":
        return
    written = new.get("metadata")
    if not isinstance(written, dict):
        return
    m = obj["metadata"]
    for key in _STATUS_METADATA:
        if key == "labels" and info.group_resource in _STATUS_KEEPS_LABELS:
            continue
        if key in written:
            if written[key] is None:
                m.pop(key, None)
            else:
                m[key] = written[key]






def _spec_changed(old: dict[str, Any], new: dict[str, Any], custom: bool = True) -> bool:
    """Whether an update changes what `generation` counts: for a custom resource anything
    but metadata and status; for a built-in kind its `spec` (kinds without one, such as
    Events and ConfigMaps, keep their generation), as Kubernetes' strategies do."""
    if not custom:
        return old.get("spec") != new.get("spec")
    for key in set(old) | set(new):
        if key in ("metadata", "status", "kind", "apiVersion"):
            continue
        if old.get(key) != new.get(key):
            return True
    return False


def _graceful_pending(old: dict[str, Any]) -> bool:
    """A bound pod still in its graceful-termination period (the agent finishes it)."""
    m = old["metadata"]
    return bool(m.get("deletionTimestamp")) and int(m.get("deletionGracePeriodSeconds") or 0) > 0
