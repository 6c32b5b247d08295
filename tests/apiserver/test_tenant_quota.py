"""Per-tenant API quotas: objects and bytes a tenant's logical cluster may hold, set by the
platform on the VirtualCluster (root cluster), enforced by the API server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from apiserver_harness import http_client
from tenants import VCS, configmap, make_tenant, tenant_client

from gpushare.apiserver.http.server import ApiServer
from gpushare.cli.compose import api_server

CMS = "/api/v1/namespaces/default/configmaps"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    data: Path = tmp_path_factory.mktemp("quota")
    s = api_server(data, "127.0.0.1", 0)
    s.start()
    try:
        yield s
    finally:
        s.stop()


def _objects(server: ApiServer, cluster: str) -> int:
    assert server.store.usage is not None
    return server.store.usage.objects[cluster]


def test_object_quota_refuses_the_create_past_it_and_names_the_quota(
        server: ApiServer) -> None:
    token = make_tenant(server, "counted", maxObjects=100_000)
    held = _objects(server, "counted")
    with http_client(server) as admin:  # the platform lowers it to three more objects
        r = admin.patch(f"{VCS}/counted", json={"spec": {"maxObjects": held + 3}},
                        headers={"Content-Type": "application/merge-patch+json"})
        assert r.status_code == 200, r.text
    with tenant_client(server, "counted", token) as tenant:
        for i in range(3):
            assert tenant.post(CMS, json=configmap(f"c{i}")).status_code == 201
        refused = tenant.post(CMS, json=configmap("c3"))
        assert refused.status_code == 403
        message = refused.json()["message"]
        assert "exceeded quota" in message and "spec.maxObjects" in message
        assert f"is {held + 3}" in message and "'counted'" in message
        assert tenant.get(f"{CMS}/c3").status_code == 404  # nothing half-written
        # updates that do not add an object still go through; a delete makes room
        cm = tenant.get(f"{CMS}/c0").json()
        cm["data"] = {"blob": "y"}
        assert tenant.put(f"{CMS}/c0", json=cm).status_code == 200
        assert tenant.delete(f"{CMS}/c1").status_code == 200
        assert tenant.post(CMS, json=configmap("c3")).status_code == 201
        assert tenant.post(CMS, json=configmap("c4")).status_code == 403
    # the platform's own writes into the tenant are counted but not refused
    with http_client(server, cluster="counted") as admin:
        assert admin.post(CMS, json=configmap("platform")).status_code == 201
    assert _objects(server, "counted") == held + 4


def test_byte_quota_refuses_growth_but_not_shrinking(server: ApiServer) -> None:
    token = make_tenant(server, "sized", maxStorageBytes="1Mi")
    with tenant_client(server, "sized", token) as tenant:
        for i in range(3):
            r = tenant.post(CMS, json=configmap(f"b{i}", 300_000))
            assert r.status_code == 201, r.text
        refused = tenant.post(CMS, json=configmap("b3", 300_000))
        assert refused.status_code == 403
        assert "spec.maxStorageBytes" in refused.json()["message"]
        assert "1048576 bytes" in refused.json()["message"]
        cm = tenant.get(f"{CMS}/b0").json()
        cm["data"] = {"blob": "x" * 600_000}  # growing an object is refused as well
        assert tenant.put(f"{CMS}/b0", json=cm).status_code == 403
        cm["data"] = {"blob": "x" * 1000}  # shrinking it is not
        assert tenant.put(f"{CMS}/b0", json=cm).status_code == 200
        assert tenant.post(CMS, json=configmap("b3", 300_000)).status_code == 201


def test_quota_fields_are_validated_with_the_field_named(server: ApiServer) -> None:
    with http_client(server) as admin:
        for field, value in (("maxObjects", -1), ("maxObjects", "many"),
                             ("maxStorageBytes", "lots"), ("maxStorageBytes", -5)):
            r = admin.post(VCS, json={"apiVersion": "tenancy.gpushare.io/v1alpha1",
                                      "kind": "VirtualCluster",
                                      "metadata": {"name": "badquota"},
                                      "spec": {"queues": ["default"], field: value}})
            assert r.status_code == 422, (field, value, r.text)
            assert f"spec.{field}" in r.text
            assert admin.get(f"{VCS}/badquota").status_code == 404


def test_a_tenant_cannot_raise_its_own_quota(server: ApiServer) -> None:
    token = make_tenant(server, "capped", maxObjects=5000)
    with http_client(server, token) as at_root:  # its token is served in its own cluster,
        r = at_root.patch(f"{VCS}/capped", json={"spec": {"maxObjects": 10**9}},
                          headers={"Content-Type": "application/merge-patch+json"})
        assert r.status_code == 404, r.text  # which has no VirtualCluster kind
    with tenant_client(server, "capped", token) as tenant:  # and its cluster has no such kind
        r = tenant.patch(f"{VCS}/capped", json={"spec": {"maxObjects": 10**9}},
                         headers={"Content-Type": "application/merge-patch+json"})
        assert r.status_code == 404
    with http_client(server) as admin:
        assert admin.get(f"{VCS}/capped").json()["spec"]["maxObjects"] == 5000


def test_defaults_apply_when_the_platform_sets_none(server: ApiServer) -> None:
    from gpushare.tenancy.policy import DEFAULT_MAX_OBJECTS, DEFAULT_MAX_STORAGE_BYTES

    make_tenant(server, "plain")
    assert server.store.usage is not None
    limits = server.store.usage.limits("plain")
    assert limits is not None
    assert (limits.max_objects, limits.max_bytes) == (DEFAULT_MAX_OBJECTS,
                                                      DEFAULT_MAX_STORAGE_BYTES)
    assert server.store.usage.limits("root") is None


def test_usage_and_quota_are_on_metrics(server: ApiServer) -> None:
    make_tenant(server, "metered", maxObjects=777)
    with http_client(server) as admin:
        text = admin.get("/metrics").text
    assert 'apiserver_tenant_objects_quota{cluster="metered"} 777.0' in text
    assert f'apiserver_tenant_objects{{cluster="metered"}} {_objects(server, "metered")}.0' \
        in text
