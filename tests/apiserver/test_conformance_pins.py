"""Behaviours Kubernetes' conformance suite checks that the embedded server got wrong
once, pinned with the official client (CI has no e2e.test; docs/apiserver.md,
"Conformance", says how the suite was run)."""

from __future__ import annotations

import orjson
import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

TABLE_ONLY = "application/json;as=Table;v=v1;g=meta.k8s.io"


def _post_review(cluster, accept: str):
    api = cluster.api_client()
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"nonResourceAttributes": {"path": "/", "verb": "get"}}}
    return _call(api, "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                 {"Accept": accept, "Content-Type": "application/json"}, body)


def _call(api: client.ApiClient, method: str, path: str, headers: dict, body=None):
    """A raw request through the official client (its auth and TLS); raises ApiException
    for an error status, as the client does."""
    request = api.param_serialize(method, path, header_params=headers, body=body,
                                  auth_settings=["BearerToken"])
    response = api.call_api(*request)
    response.read()
    if not 200 <= response.status < 300:
        raise ApiException(http_resp=response)
    return response


def test_a_table_of_an_access_review_is_406(cluster):
    # [sig-api-machinery] Servers with support for Table transformation should return a
    # 406 for a backend which does not implement metadata
    with pytest.raises(ApiException) as raised:
        _post_review(cluster, TABLE_ONLY)
    assert raised.value.status == 406
    # A client that also accepts JSON gets the review.
    answer = _post_review(cluster, f"{TABLE_ONLY}, application/json")
    assert answer.status == 201 and b'"allowed":true' in answer.data


def test_stored_kinds_still_answer_tables(cluster):
    api = cluster.api_client()
    response = _call(api, "GET", "/api/v1/namespaces", {"Accept": TABLE_ONLY})
    assert response.status == 200
    assert b'"kind":"Table"' in response.data
    assert client.CoreV1Api(api).list_namespace().items


def _pod(name: str, *, cpu: str | None = None, deadline: int | None = None) -> dict:
    container: dict = {"name": "c", "image": "busybox"}
    if cpu:
        container["resources"] = {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}
    spec: dict = {"containers": [container]}
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _used(core, ns: str, name: str) -> dict:
    return core.read_namespaced_resource_quota(name, ns).status.used


def test_quota_scopes_count_only_their_pods(cluster):
    # [sig-api-machinery] ResourceQuota should verify ResourceQuota with best effort scope
    # / with terminating scopes
    core = client.CoreV1Api(cluster.api_client())
    ns = "quota-scopes"
    core.create_namespace({"metadata": {"name": ns}})
    for name, scope, pods in (("best-effort", "BestEffort", "2"),
                              ("not-best-effort", "NotBestEffort", "2"),
                              ("terminating", "Terminating", "5"),
                              ("not-terminating", "NotTerminating", "5")):
        core.create_namespaced_resource_quota(ns, {"metadata": {"name": name}, "spec": {
            "hard": {"pods": pods}, "scopes": [scope]}})
    core.create_namespaced_pod(ns, _pod("plain"))                    # best effort, long-running
    core.create_namespaced_pod(ns, _pod("sized", cpu="100m"))         # burstable
    core.create_namespaced_pod(ns, _pod("batch", cpu="100m", deadline=60))  # terminating
    assert _used(core, ns, "best-effort") == {"pods": "1"}
    assert _used(core, ns, "not-best-effort") == {"pods": "2"}
    assert _used(core, ns, "terminating") == {"pods": "1"}
    assert _used(core, ns, "not-terminating") == {"pods": "2"}
    # A third not-best-effort pod is over that quota; a best-effort one is not.
    with pytest.raises(ApiException) as raised:
        core.create_namespaced_pod(ns, _pod("sized-2", cpu="100m"))
    assert raised.value.status == 403 and "not-best-effort" in raised.value.body
    core.create_namespaced_pod(ns, _pod("plain-2"))
    assert _used(core, ns, "best-effort") == {"pods": "2"}


def _crd(plural: str, schema: dict) -> dict:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.pins.example.com"},
            "spec": {"group": "pins.example.com", "scope": "Namespaced",
                     "names": {"plural": plural, "singular": plural[:-1],
                               "kind": plural[:-1].capitalize(),
                               "listKind": plural[:-1].capitalize() + "List"},
                     "versions": [{"name": "v1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": schema}}]}}


def test_crd_status_update_keeps_the_writers_conditions(cluster):
    # [sig-api-machinery] CustomResourceDefinition resources ... getting/updating/patching
    # custom resource definition status sub-resource works
    ext = client.ApiextensionsV1Api(cluster.api_client())
    ext.create_custom_resource_definition(_crd("statuses", {"type": "object"}))
    crd = ext.read_custom_resource_definition_status("statuses.pins.example.com")
    crd.status.conditions.append(client.V1CustomResourceDefinitionCondition(
        type="StatusUpdated", status="True", reason="E2E", message="updated"))
    ext.replace_custom_resource_definition_status("statuses.pins.example.com", crd)
    patch = {"status": {"conditions": [
        *[c.to_dict() for c in crd.status.conditions],
        {"type": "StatusPatched", "status": "True", "reason": "E2E", "message": "patched"}]}}
    ext.patch_custom_resource_definition_status("statuses.pins.example.com", patch)
    got = ext.read_custom_resource_definition("statuses.pins.example.com")
    kinds = {c.type: c for c in got.status.conditions}
    assert kinds["StatusUpdated"].message == "updated"
    assert kinds["StatusPatched"].message == "patched"
    assert kinds["Established"].status == "True"  # the server's own condition stays


def test_custom_resources_are_defaulted_on_requests_and_on_read(cluster):
    # [sig-api-machinery] CustomResourceDefinition resources ... custom resource defaulting
    # for requests and from storage works
    ext = client.ApiextensionsV1Api(cluster.api_client())
    custom = client.CustomObjectsApi(cluster.api_client())
    schema = {"type": "object", "properties": {
        "a": {"type": "string"}, "b": {"type": "string"},
        "spec": {"type": "object", "properties": {"c": {"type": "integer", "default": 3}}}}}
    ext.create_custom_resource_definition(_crd("defaults", schema))
    args = ("pins.example.com", "v1", "default", "defaults")
    made = custom.create_namespaced_custom_object(
        *args, {"apiVersion": "pins.example.com/v1", "kind": "Default",
                "metadata": {"name": "before"}, "spec": {}})
    assert made["spec"] == {"c": 3} and "a" not in made  # defaulted on the request
    patch = [{"op": "add", "path": "/spec/versions/0/schema/openAPIV3Schema/properties/a/"
              "default", "value": "A"}]
    ext.patch_custom_resource_definition("defaults.pins.example.com", patch)
    # Stored before the default existed: defaulted when read (get, list).
    assert custom.get_namespaced_custom_object(*args, "before")["a"] == "A"
    listed = custom.list_namespaced_custom_object(*args)["items"]
    assert [o.get("a") for o in listed] == ["A"]
    created = custom.create_namespaced_custom_object(
        *args, {"apiVersion": "pins.example.com/v1", "kind": "Default",
                "metadata": {"name": "after"}})
    assert created["a"] == "A" and "b" not in created


def test_openapi_v2_publishes_a_preserving_root_as_a_bare_object(cluster):
    # [sig-api-machinery] CustomResourcePublishOpenAPI ... works for CRD without validation
    # schema: kubectl must not validate fields of such a kind
    ext = client.ApiextensionsV1Api(cluster.api_client())
    ext.create_custom_resource_definition(_crd("loosers", {
        "type": "object", "x-kubernetes-preserve-unknown-fields": True}))
    api = cluster.api_client()
    doc = orjson.loads(_call(api, "GET", "/openapi/v2", {"Accept": "application/json"}).data)
    definition = doc["definitions"]["com.example.pins.v1.Looser"]
    assert definition["type"] == "object" and "properties" not in definition
    assert "x-kubernetes-preserve-unknown-fields" not in definition


def test_status_writes_of_built_in_kinds_carry_metadata(cluster):
    # [sig-apps] CronJob should support CronJob API operations: patching /status with an
    # annotation keeps the annotation (Kubernetes' status strategies apply metadata)
    batch = client.BatchV1Api(cluster.api_client())
    batch.create_namespaced_cron_job("default", {
        "metadata": {"name": "nightly"},
        "spec": {"schedule": "0 0 * * *", "jobTemplate": {"spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}}})
    patched = batch.patch_namespaced_cron_job_status("nightly", "default", {
        "metadata": {"annotations": {"patchedstatus": "true"}},
        "status": {"lastScheduleTime": "2026-01-01T00:00:00Z"}})
    assert patched.metadata.annotations["patchedstatus"] == "true"
    assert patched.status.last_schedule_time is not None
    # A Deployment's status write keeps its labels (Kubernetes resets them there).
    apps = client.AppsV1Api(cluster.api_client())
    apps.create_namespaced_deployment("default", {
        "metadata": {"name": "web", "labels": {"tier": "front"}},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}})
    written = apps.patch_namespaced_deployment_status("web", "default", {
        "metadata": {"labels": {"tier": "back"}, "annotations": {"seen": "yes"}},
        "status": {"observedGeneration": 1}})
    assert written.metadata.labels == {"tier": "front"}
    assert written.metadata.annotations["seen"] == "yes"


def test_foreground_deletion_keeps_dependents_with_another_owner(cluster):
    # [sig-api-machinery] Garbage collector should not delete dependents that have both
    # valid owner and owner that's waiting for dependents to be deleted
    import time

    core = client.CoreV1Api(cluster.api_client())
    ns = "gc-owners"
    core.create_namespace({"metadata": {"name": ns}})
    owners = {n: core.create_namespaced_config_map(ns, {"metadata": {"name": n}})
              for n in ("going", "staying")}

    def ref(name):
        return {"apiVersion": "v1", "kind": "ConfigMap", "name": name,
                "uid": owners[name].metadata.uid}

    core.create_namespaced_config_map(ns, {"metadata": {
        "name": "only-going", "ownerReferences": [ref("going")]}})
    core.create_namespaced_config_map(ns, {"metadata": {
        "name": "both", "ownerReferences": [ref("going"), ref("staying")]}})
    core.delete_namespaced_config_map("going", ns, propagation_policy="Foreground")
    deadline = time.monotonic() + 20
    names: set[str] = set()
    while time.monotonic() < deadline:
        names = {c.metadata.name for c in core.list_namespaced_config_map(ns).items}
        if "going" not in names and "only-going" not in names:
            break
        time.sleep(0.2)
    assert "going" not in names and "only-going" not in names
    assert "both" in names
    kept = core.read_namespaced_config_map("both", ns)
    assert [r.name for r in kept.metadata.owner_references] == ["staying"]


def test_foreground_deletion_of_an_ownership_cycle_finishes(cluster):
    # [sig-api-machinery] Garbage collector should not be blocked by dependency circle
    import time

    core = client.CoreV1Api(cluster.api_client())
    ns = "gc-cycle"
    core.create_namespace({"metadata": {"name": ns}})
    made = {n: core.create_namespaced_config_map(ns, {"metadata": {"name": n}})
            for n in ("one", "two", "three")}
    for child, parent in (("one", "three"), ("two", "one"), ("three", "two")):
        core.patch_namespaced_config_map(child, ns, {"metadata": {"ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": parent,
            "uid": made[parent].metadata.uid, "blockOwnerDeletion": True}]}})
    core.delete_namespaced_config_map("one", ns, propagation_policy="Foreground")
    deadline = time.monotonic() + 30
    left: set[str] = {"one", "two", "three"}
    while time.monotonic() < deadline and left:
        left = {c.metadata.name for c in core.list_namespaced_config_map(ns).items} & left
        time.sleep(0.3)
    assert not left


def test_event_field_selectors_across_both_event_apis(cluster):
    # [sig-instrumentation] Events API should ensure that an event can be fetched,
    # patched, deleted, and listed: source= on core, reportingController= on events.k8s.io
    events = client.EventsV1Api(cluster.api_client())
    core = client.CoreV1Api(cluster.api_client())
    events.create_namespaced_event("default", {
        "metadata": {"name": "reported"}, "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "test-controller", "reportingInstance": "test-node",
        "action": "Testing", "reason": "Test", "type": "Normal", "note": "hello",
        "regarding": {"kind": "Pod", "name": "p", "namespace": "default"}})
    core_hits = core.list_namespaced_event("default", field_selector="source=test-controller")
    assert [e.metadata.name for e in core_hits.items] == ["reported"]
    hits = events.list_namespaced_event("default",
                                        field_selector="reportingController=test-controller")
    assert [e.metadata.name for e in hits.items] == ["reported"]


def test_csrs_select_by_signer_name(cluster):
    # [sig-auth] Certificates API should support CSR API operations
    certs = client.CertificatesV1Api(cluster.api_client())
    listed = certs.list_certificate_signing_request(
        field_selector="spec.signerName=example.com/none")
    assert listed.items == []


def test_generation_counts_spec_changes_of_built_in_kinds_only(cluster):
    # [sig-instrumentation] Events API ...: a patched event keeps its generation
    events = client.EventsV1Api(cluster.api_client())
    made = events.create_namespaced_event("default", {
        "metadata": {"name": "generations"}, "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "c", "reportingInstance": "i", "action": "A",
        "reason": "R", "type": "Normal", "note": "first",
        "regarding": {"kind": "Pod", "name": "p", "namespace": "default"}})
    patched = events.patch_namespaced_event("generations", "default", {"note": "second"})
    assert patched.note == "second"
    assert patched.metadata.generation == made.metadata.generation
    core = client.CoreV1Api(cluster.api_client())
    core.create_namespaced_config_map("default", {"metadata": {"name": "gen"}, "data": {"a": "1"}})
    changed = core.patch_namespaced_config_map("gen", "default", {"data": {"a": "2"}})
    assert changed.metadata.generation in (None, 1)
    apps = client.AppsV1Api(cluster.api_client())
    apps.create_namespaced_deployment("default", {
        "metadata": {"name": "gen"},
        "spec": {"selector": {"matchLabels": {"app": "gen"}}, "template": {
            "metadata": {"labels": {"app": "gen"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}})
    scaled = apps.patch_namespaced_deployment("gen", "default", {"spec": {"replicas": 3}})
    assert scaled.metadata.generation == 2
