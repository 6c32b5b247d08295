"""Behaviours Kubernetes' conformance suite checks that the embedded server got wrong
once, pinned with the official client (CI has no e2e.test; docs/apiserver.md,
"Conformance", says how the suite was run)."""

from __future__ import annotations

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
