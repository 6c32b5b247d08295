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
