"""API semantics over raw HTTP: watch, selectors, paging, binding, deletion, GC, validation."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson
import pytest
from apiserver_harness import Cluster, http_client

PODS = "/api/v1/namespaces/default/pods"


@pytest.fixture(scope="module")
def http(cluster: Cluster) -> Iterator[httpx.Client]:
    with http_client(cluster.server) as c:
        yield c


def pod(name: str, labels: dict[str, str] | None = None, **annotations: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {}, "annotations": annotations},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]}}


def create(http: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    r = http.post(path, json=body)
    assert r.status_code == 201, r.text
    return r.json()


def eventually(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.05)


def gone(http: httpx.Client, path: str) -> Callable[[], bool]:
    return lambda: http.get(path).status_code == 404


def watch_events(http: httpx.Client, path: str, params: dict[str, str],
                 count: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    with http.stream("GET", path, params={"watch": "true", **params}) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line:
                events.append(orjson.loads(line))
            if len(events) >= count:
                break
    return events


# -- watch -----------------------------------------------------------------------------------


def test_watch_from_zero_lists_then_streams(http: httpx.Client) -> None:
    create(http, PODS, pod("w-a", {"grp": "w0"}))
    events = watch_events(http, PODS, {"resourceVersion": "0", "labelSelector": "grp=w0",
                                       "timeoutSeconds": "2"}, 1)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "w-a")]


def test_watch_sends_bookmarks(http: httpx.Client) -> None:
    rv = http.get(PODS).json()["metadata"]["resourceVersion"]
    events = watch_events(http, PODS, {"resourceVersion": rv, "allowWatchBookmarks": "true",
                                       "labelSelector": "never=seen", "timeoutSeconds": "5"}, 1)
    assert events[0]["type"] == "BOOKMARK"
    assert int(events[0]["object"]["metadata"]["resourceVersion"]) >= int(rv)


def test_watch_timeout_ends_the_stream(http: httpx.Client) -> None:
    # Without the timeout the stream would stay open and the client's read would time out.
    events = watch_events(http, PODS, {"resourceVersion": http.get(PODS).json()["metadata"][
        "resourceVersion"], "timeoutSeconds": "1", "labelSelector": "none=here"}, 10)
    assert events == []


def test_watch_label_change_out_of_selection_is_a_delete(http: httpx.Client) -> None:
    create(http, PODS, pod("w-b", {"grp": "w1"}))
    rv = http.get(f"{PODS}/w-b").json()["metadata"]["resourceVersion"]
    http.patch(f"{PODS}/w-b", content=b'{"metadata":{"labels":{"grp":"other"}}}',
               headers={"Content-Type": "application/merge-patch+json"})
    events = watch_events(http, PODS, {"resourceVersion": rv, "labelSelector": "grp=w1",
                                       "timeoutSeconds": "2"}, 1)
    assert events[0]["type"] == "DELETED"


def test_too_old_resource_version_is_410_expired(http: httpx.Client) -> None:
    # The test server keeps 200 events: push more than that through the log.
    for i in range(210):
        create(http, "/api/v1/namespaces/default/configmaps", {"metadata": {"name": f"f{i}"}})
    events = watch_events(http, PODS, {"resourceVersion": "1"}, 1)
    assert events[0]["type"] == "ERROR"
    status = events[0]["object"]
    assert status["code"] == 410 and status["reason"] == "Expired"
    assert "too old resource version" in status["message"]


def test_send_initial_events_requires_its_companions(http: httpx.Client) -> None:
    r = http.get(PODS, params={"watch": "true", "sendInitialEvents": "true"})
    assert r.status_code == 422
    events = watch_events(http, PODS, {"sendInitialEvents": "true", "allowWatchBookmarks":
                                       "true", "resourceVersionMatch": "NotOlderThan",
                                       "labelSelector": "grp=w0", "timeoutSeconds": "2"}, 2)
    assert events[0]["type"] == "ADDED"
    assert events[1]["type"] == "BOOKMARK"
    assert events[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end":
                                                              "true"}


# -- selectors and paging ----------------------------------------------------------------------


def names(resp: httpx.Response) -> list[str]:
    assert resp.status_code == 200, resp.text
    return sorted(o["metadata"]["name"] for o in resp.json()["items"])


def test_label_selectors(http: httpx.Client) -> None:
    for name, labels in (("s1", {"tier": "a", "env": "x"}), ("s2", {"tier": "b"}),
                         ("s3", {"tier": "c", "env": "y"})):
        create(http, PODS, pod(name, {**labels, "sel": "1"}))

    def q(selector: str) -> list[str]:
        return names(http.get(PODS, params={"labelSelector": f"sel=1,{selector}"}))

    assert q("tier=a") == ["s1"]
    assert q("tier==b") == ["s2"]
    assert q("tier!=a") == ["s2", "s3"]
    assert q("tier in (a,c)") == ["s1", "s3"]
    assert q("tier notin (a,c)") == ["s2"]
    assert q("env") == ["s1", "s3"]
    assert q("!env") == ["s2"]
    assert http.get(PODS, params={"labelSelector": "bad key!"}).status_code == 400


def test_field_selectors(http: httpx.Client) -> None:
    create(http, PODS, pod("f-bound", {"fsel": "1"}))
    create(http, PODS, pod("f-free", {"fsel": "1"}))
    r = http.post(f"{PODS}/f-bound/binding", json={"apiVersion": "v1", "kind": "Binding",
                                                    "metadata": {"name": "f-bound"},
                                                    "target": {"kind": "Node", "name": "n9"}})
    assert r.status_code == 201

    def q(selector: str) -> list[str]:
        return names(http.get(PODS, params={"labelSelector": "fsel=1",
                                            "fieldSelector": selector}))

    assert q("spec.nodeName=n9") == ["f-bound"]
    assert q("spec.nodeName=") == ["f-free"]
    assert q("spec.nodeName!=n9") == ["f-free"]
    assert q("status.phase=Pending,metadata.name=f-free") == ["f-free"]
    assert q("spec.schedulerName=gpushare") == ["f-bound", "f-free"]
    all_ns = http.get("/api/v1/pods", params={"fieldSelector": "metadata.namespace=default,"
                                                                "spec.nodeName=n9"})
    assert names(all_ns) == ["f-bound"]
    assert http.get(PODS, params={"fieldSelector": "spec.unknown=1"}).status_code == 400


def test_pagination(http: httpx.Client) -> None:
    for i in range(5):
        create(http, "/api/v1/namespaces/default/secrets", {"metadata": {
            "name": f"page-{i}", "labels": {"page": "1"}}})
    seen: list[str] = []
    params = {"labelSelector": "page=1", "limit": "2"}
    while True:
        body = http.get("/api/v1/namespaces/default/secrets", params=params).json()
        seen += [o["metadata"]["name"] for o in body["items"]]
        token = body["metadata"].get("continue")
        if not token:
            break
        params["continue"] = token
    assert seen == [f"page-{i}" for i in range(5)]


# -- writes ------------------------------------------------------------------------------------


def test_generation_bumps_on_spec_changes_only(http: httpx.Client) -> None:
    path = "/apis/apps/v1/namespaces/default/deployments"
    dep = {"metadata": {"name": "gen"}, "spec": {
        "selector": {"matchLabels": {"app": "gen"}},
        "template": {"metadata": {"labels": {"app": "gen"}},
                     "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}
    created = create(http, path, dep)
    assert created["metadata"]["generation"] == 1
    h = {"Content-Type": "application/merge-patch+json"}
    r = http.patch(f"{path}/gen", content=b'{"metadata":{"labels":{"l":"1"}}}', headers=h)
    assert r.json()["metadata"]["generation"] == 1
    r = http.patch(f"{path}/gen", content=b'{"spec":{"replicas":3}}', headers=h)
    assert r.json()["metadata"]["generation"] == 2
    r = http.patch(f"{path}/gen/status", content=b'{"status":{"replicas":3}}', headers=h)
    assert r.json()["metadata"]["generation"] == 2 and r.json()["status"]["replicas"] == 3
    r = http.patch(f"{path}/gen", content=b'{"status":{"replicas":9}}', headers=h)
    assert r.json()["status"]["replicas"] == 3  # status only through the subresource


def test_noop_update_keeps_the_resource_version(http: httpx.Client) -> None:
    cm = create(http, "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "noop"},
                                                                 "data": {"a": "1"}})
    r = http.put("/api/v1/namespaces/default/configmaps/noop", json=cm)
    assert r.json()["metadata"]["resourceVersion"] == cm["metadata"]["resourceVersion"]


def test_binding_sets_node_and_annotations_once(http: httpx.Client) -> None:
    create(http, PODS, pod("b1"))
    binding = {"apiVersion": "v1", "kind": "Binding",
               "metadata": {"name": "b1", "annotations": {"gpushare.io/gpu-indices": "0",
                                                          "gpushare.io/gpu-portion": "0.5"}},
               "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"}}
    r = http.post(f"{PODS}/b1/binding", json=binding)
    assert r.status_code == 201
    got = http.get(f"{PODS}/b1").json()
    assert got["spec"]["nodeName"] == "node-1"
    assert got["metadata"]["annotations"]["gpushare.io/gpu-portion"] == "0.5"
    assert any(c["type"] == "PodScheduled" and c["status"] == "True"
               for c in got["status"]["conditions"])
    again = http.post(f"{PODS}/b1/binding", json=binding)
    assert again.status_code == 409 and again.json()["reason"] == "Conflict"
    create(http, PODS, pod("b2"))
    legacy = http.post("/api/v1/namespaces/default/bindings", json={
        **binding, "metadata": {"name": "b2"}})
    assert legacy.status_code == 201
    assert http.get(f"{PODS}/b2").json()["spec"]["nodeName"] == "node-1"


def test_graceful_pod_deletion(http: httpx.Client) -> None:
    create(http, PODS, pod("g-unbound"))
    assert http.delete(f"{PODS}/g-unbound").status_code == 200
    assert http.get(f"{PODS}/g-unbound").status_code == 404
    create(http, PODS, pod("g-bound"))
    http.post(f"{PODS}/g-bound/binding", json={"metadata": {"name": "g-bound"},
                                               "target": {"kind": "Node", "name": "n1"}})
    r = http.delete(f"{PODS}/g-bound")
    assert r.status_code == 202
    kept = http.get(f"{PODS}/g-bound").json()
    assert kept["metadata"]["deletionTimestamp"]
    assert kept["metadata"]["deletionGracePeriodSeconds"] == 30
    # The agent finishes the deletion once the process is gone.
    assert http.delete(f"{PODS}/g-bound", params={"gracePeriodSeconds": "0"}).status_code == 200
    assert http.get(f"{PODS}/g-bound").status_code == 404


def test_eviction_deletes_the_pod(http: httpx.Client) -> None:
    create(http, PODS, pod("ev1"))
    r = http.post(f"{PODS}/ev1/eviction", json={"apiVersion": "policy/v1", "kind": "Eviction",
                                                "metadata": {"name": "ev1"}})
    assert r.status_code == 201
    assert http.get(f"{PODS}/ev1").status_code == 404


def test_delete_preconditions(http: httpx.Client) -> None:
    cm = create(http, "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "pre"}})
    r = http.request("DELETE", "/api/v1/namespaces/default/configmaps/pre",
                     json={"preconditions": {"uid": "not-the-uid"}})
    assert r.status_code == 409
    r = http.request("DELETE", "/api/v1/namespaces/default/configmaps/pre",
                     json={"preconditions": {"uid": cm["metadata"]["uid"]}})
    assert r.status_code == 200 and r.json()["status"] == "Success"


def test_finalizers_keep_the_object_until_removed(http: httpx.Client) -> None:
    path = "/api/v1/namespaces/default/configmaps"
    create(http, path, {"metadata": {"name": "fin", "finalizers": ["example.com/hold"]}})
    assert http.delete(f"{path}/fin").status_code == 202
    held = http.get(f"{path}/fin").json()
    assert held["metadata"]["deletionTimestamp"]
    r = http.patch(f"{path}/fin", content=b'{"metadata":{"finalizers":null}}',
                   headers={"Content-Type": "application/merge-patch+json"})
    assert r.status_code == 200
    assert http.get(f"{path}/fin").status_code == 404


def test_deletecollection(http: httpx.Client) -> None:
    path = "/api/v1/namespaces/default/configmaps"
    for i in range(3):
        create(http, path, {"metadata": {"name": f"dc{i}", "labels": {"dc": "1"}}})
    create(http, path, {"metadata": {"name": "dc-keep"}})
    r = http.request("DELETE", path, params={"labelSelector": "dc=1"})
    assert r.status_code == 200
    assert names(http.get(path, params={"labelSelector": "dc=1"})) == []
    assert http.get(f"{path}/dc-keep").status_code == 200


# -- garbage collection and namespaces ---------------------------------------------------------


def _owned(http: httpx.Client, owner: dict[str, Any], name: str) -> None:
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": owner["metadata"]["name"],
           "uid": owner["metadata"]["uid"], "blockOwnerDeletion": True}
    create(http, "/api/v1/namespaces/default/configmaps", {"metadata": {
        "name": name, "ownerReferences": [ref]}})


def test_background_cascade(http: httpx.Client) -> None:
    path = "/api/v1/namespaces/default/configmaps"
    owner = create(http, path, {"metadata": {"name": "own-bg"}})
    _owned(http, owner, "dep-bg-1")
    _owned(http, owner, "dep-bg-2")
    assert http.delete(f"{path}/own-bg").status_code == 200
    eventually(gone(http, f"{path}/dep-bg-1"))
    eventually(gone(http, f"{path}/dep-bg-2"))


def test_foreground_cascade(http: httpx.Client) -> None:
    path = "/api/v1/namespaces/default/configmaps"
    owner = create(http, path, {"metadata": {"name": "own-fg"}})
    _owned(http, owner, "dep-fg")
    create(http, path, {"metadata": {"name": "dep-fg-held", "finalizers": ["example.com/x"],
                                     "ownerReferences": [{"apiVersion": "v1",
                                                          "kind": "ConfigMap",
                                                          "name": "own-fg",
                                                          "uid": owner["metadata"]["uid"],
                                                          "blockOwnerDeletion": True}]}})
    r = http.request("DELETE", f"{path}/own-fg", json={"propagationPolicy": "Foreground"})
    assert r.status_code == 202
    assert "foregroundDeletion" in http.get(f"{path}/own-fg").json()["metadata"]["finalizers"]
    eventually(gone(http, f"{path}/dep-fg"))
    time.sleep(1.2)
    # waits for the held dependent: its reference blocks the owner's deletion (one without
    # blockOwnerDeletion would not, as in Kubernetes)
    assert http.get(f"{path}/own-fg").status_code == 200
    http.patch(f"{path}/dep-fg-held", content=b'{"metadata":{"finalizers":null}}',
               headers={"Content-Type": "application/merge-patch+json"})
    eventually(gone(http, f"{path}/own-fg"))


def test_orphan_keeps_dependents(http: httpx.Client) -> None:
    path = "/api/v1/namespaces/default/configmaps"
    owner = create(http, path, {"metadata": {"name": "own-or"}})
    _owned(http, owner, "dep-or")
    http.request("DELETE", f"{path}/own-or", json={"propagationPolicy": "Orphan"})
    eventually(gone(http, f"{path}/own-or"))
    dep = http.get(f"{path}/dep-or").json()
    assert "ownerReferences" not in dep["metadata"]


def test_namespace_deletion_cascades(http: httpx.Client) -> None:
    create(http, "/api/v1/namespaces", {"metadata": {"name": "doomed"}})
    create(http, "/api/v1/namespaces/doomed/pods", pod("inside"))
    create(http, "/api/v1/namespaces/doomed/configmaps", {"metadata": {"name": "c"}})
    create(http, "/api/v1/namespaces/doomed/configmaps", {"metadata": {
        "name": "held", "finalizers": ["example.com/x"]}})
    r = http.delete("/api/v1/namespaces/doomed")
    assert r.status_code == 202 and r.json()["status"]["phase"] == "Terminating"
    refused = http.post("/api/v1/namespaces/doomed/configmaps", json={"metadata": {"name": "n"}})
    assert refused.status_code == 403
    eventually(gone(http, "/api/v1/namespaces/doomed/pods/inside"))
    time.sleep(1.2)
    assert http.get("/api/v1/namespaces/doomed").status_code == 200  # waits for "held"
    http.patch("/api/v1/namespaces/doomed/configmaps/held",
               content=b'{"metadata":{"finalizers":null}}',
               headers={"Content-Type": "application/merge-patch+json"})
    eventually(gone(http, "/api/v1/namespaces/doomed"))
    assert http.get("/api/v1/namespaces/doomed/configmaps/c").status_code == 404


def test_create_in_missing_namespace_is_404(http: httpx.Client) -> None:
    r = http.post("/api/v1/namespaces/nowhere/configmaps", json={"metadata": {"name": "x"}})
    assert r.status_code == 404 and r.json()["details"]["kind"] == "namespaces"


# -- validation --------------------------------------------------------------------------------


def causes(r: httpx.Response) -> set[str]:
    assert r.status_code == 422, r.text
    return {c["field"] for c in r.json()["details"]["causes"]}


@pytest.mark.parametrize(("annotations", "limits", "field"), [
    ({"gpu-fraction": "1.5"}, {}, "metadata.annotations.gpu-fraction"),
    ({"gpu-fraction": "0"}, {}, "metadata.annotations.gpu-fraction"),
    ({"gpu-fraction": "abc"}, {}, "metadata.annotations.gpu-fraction"),
    ({"gpu-fraction": "0.5", "gpu-memory": "1000"}, {}, "metadata.annotations.gpu-fraction"),
    ({"gpu-fraction": "0.5"}, {"nvidia.com/gpu": "1"}, "metadata.annotations.gpu-fraction"),
    ({"gpu-memory": "-4"}, {}, "metadata.annotations.gpu-memory"),
    ({"gpu-memory": "1.5"}, {}, "metadata.annotations.gpu-memory"),
    ({"gpu-fraction-num-devices": "2"}, {}, "metadata.annotations.gpu-fraction-num-devices"),
    ({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "0"}, {},
     "metadata.annotations.gpu-fraction-num-devices"),
])
def test_bad_gpu_requests_are_rejected(http: httpx.Client, annotations: dict[str, str],
                                       limits: dict[str, str], field: str) -> None:
    body = pod("gpu-bad", **annotations)
    if limits:
        body["spec"]["containers"][0]["resources"] = {"limits": limits}
    assert field in causes(http.post(PODS, json=body))
    assert http.get(f"{PODS}/gpu-bad").status_code == 404


def test_good_gpu_requests_are_accepted(http: httpx.Client) -> None:
    create(http, PODS, pod("gpu-frac", **{"gpu-fraction": "0.33",
                                          "gpu-fraction-num-devices": "2"}))
    create(http, PODS, pod("gpu-mem", **{"gpu-memory": "2000"}))


def test_names_and_required_fields(http: httpx.Client) -> None:
    assert "metadata.name" in causes(http.post(PODS, json=pod("Bad_Name")))
    no_containers = {"metadata": {"name": "empty"}, "spec": {"containers": []}}
    assert "spec.containers" in causes(http.post(PODS, json=no_containers))
    no_image = {"metadata": {"name": "noimg"}, "spec": {"containers": [{"name": "c"}]}}
    assert "spec.containers[0].image" in causes(http.post(PODS, json=no_image))


QUEUES = "/apis/scheduling.run.ai/v2/queues"


def queue(name: str, parent: str | None = None, **gpu: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"resources": {"gpu": gpu or {"quota": 1, "limit": -1}}}
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
            "spec": spec}


def lending_causes(r: httpx.Response) -> list[str]:
    assert r.status_code == 422, r.text
    return [f"{c['field']}: {c['message']}" for c in r.json()["details"]["causes"]
            if c["field"] == "spec.resources.gpu.lendingLimit"]


def test_queue_lending_limit_validation(http: httpx.Client) -> None:
    negative = lending_causes(http.post(QUEUES, json=queue("l1", quota=3, lendingLimit=-1)))
    assert negative and ("at least 0" in negative[0] or "greater than or equal to 0"
                         in negative[0]), negative
    over = lending_causes(http.post(QUEUES, json=queue("l2", quota=3, lendingLimit=4)))
    assert over and "may not exceed quota (3)" in over[0], over
    assert lending_causes(http.post(QUEUES, json=queue("l3", quota=3, lendingLimit="some")))
    unlimited = lending_causes(http.post(QUEUES, json=queue("l4", quota=-1, lendingLimit=1)))
    assert unlimited and "finite quota" in unlimited[0], unlimited
    made = create(http, QUEUES, queue("l5", quota=3, lendingLimit=1))
    assert made["spec"]["resources"]["gpu"]["lendingLimit"] == 1


def test_queue_validation(http: httpx.Client) -> None:
    assert "spec.resources.gpu.quota" in causes(http.post(QUEUES, json=queue("v1", quota=-2)))
    assert "spec.resources.gpu.limit" in causes(http.post(QUEUES, json=queue("v2", limit=-3)))
    assert "spec.resources.gpu.quota" in causes(http.post(QUEUES, json=queue(
        "v3", quota=2, limit=1)))
    assert "spec.resources.gpu.quota" in causes(http.post(QUEUES, json=queue(
        "v4", quota="lots")))
    assert "spec.parentQueue" in causes(http.post(QUEUES, json=queue("v5", parent="ghost")))
    no_resources = {"metadata": {"name": "v6"}, "spec": {"priority": 1}}
    assert "spec.resources" in causes(http.post(QUEUES, json=no_resources))
    create(http, QUEUES, queue("qa"))
    create(http, QUEUES, queue("qb", parent="qa"))
    cyc = http.get(f"{QUEUES}/qa").json()
    cyc["spec"]["parentQueue"] = "qb"
    assert "spec.parentQueue" in causes(http.put(f"{QUEUES}/qa", json=cyc))
    assert http.delete(f"{QUEUES}/qa").status_code == 409
    assert http.delete(f"{QUEUES}/qb").status_code == 200
    assert http.delete(f"{QUEUES}/qa").status_code == 200


def test_stale_update_is_409_with_status(http: httpx.Client) -> None:
    q = create(http, QUEUES, queue("stale"))
    q["spec"]["priority"] = 5
    assert http.put(f"{QUEUES}/stale", json=q).status_code == 200
    q["spec"]["priority"] = 6
    r = http.put(f"{QUEUES}/stale", json=q)
    assert r.status_code == 409
    assert r.json()["kind"] == "Status" and r.json()["reason"] == "Conflict"


def test_unauthenticated_is_401(cluster: Cluster) -> None:
    with http_client(cluster.server, token="wrong") as c:
        r = c.get(PODS)
        assert r.status_code == 401 and r.json()["reason"] == "Unauthorized"
        assert c.get("/healthz").status_code == 200


def test_metrics(http: httpx.Client) -> None:
    text = http.get("/metrics").text
    assert 'apiserver_request_total{code="201",resource="pods",verb="create"}' in text
    assert "apiserver_request_duration_seconds_bucket" in text
    assert "apiserver_storage_objects" in text and "apiserver_watches" in text


def test_dependents_of_missing_owners(http: httpx.Client) -> None:
    path = "/api/v1/namespaces/default/configmaps"
    dangling = {"apiVersion": "v1", "kind": "ConfigMap", "name": "never-was", "uid": "u-1"}
    create(http, path, {"metadata": {"name": "late-dep", "ownerReferences": [dangling]}})
    eventually(gone(http, f"{path}/late-dep"))
    unknown = {"apiVersion": "example.com/v1", "kind": "Unserved", "name": "x", "uid": "u-2"}
    create(http, path, {"metadata": {"name": "unknown-owner", "ownerReferences": [unknown]}})
    time.sleep(1.2)
    assert http.get(f"{path}/unknown-owner").status_code == 200


def test_force_deleted_pod_goes_when_its_finalizers_do(http: httpx.Client) -> None:
    body = pod("fin-pod")
    body["metadata"]["finalizers"] = ["example.com/keep"]
    create(http, PODS, body)
    http.post(f"{PODS}/fin-pod/binding", json={"metadata": {"name": "fin-pod"},
                                               "target": {"kind": "Node", "name": "n1"}})
    assert http.delete(f"{PODS}/fin-pod").status_code == 202  # graceful: the agent's turn
    assert http.delete(f"{PODS}/fin-pod", params={"gracePeriodSeconds": "0"}).status_code == 202
    assert http.get(f"{PODS}/fin-pod").json()["metadata"]["deletionGracePeriodSeconds"] == 0
    http.patch(f"{PODS}/fin-pod", content=b'{"metadata":{"finalizers":null}}',
               headers={"Content-Type": "application/merge-patch+json"})
    assert http.get(f"{PODS}/fin-pod").status_code == 404


def test_priority_classes_and_pod_priority(http: httpx.Client) -> None:
    pcs = "/apis/scheduling.k8s.io/v1/priorityclasses"
    names_ = {p["metadata"]["name"]: p["value"] for p in http.get(pcs).json()["items"]}
    assert names_ == {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}
    assert "value" in causes(http.post(pcs, json={"metadata": {"name": "novalue"}}))
    body = pod("prio")
    body["spec"]["priorityClassName"] = "inference"
    assert create(http, PODS, body)["spec"]["priority"] == 125
    body = pod("noprio")
    body["spec"]["priorityClassName"] = "missing"
    r = http.post(PODS, json=body)
    assert r.status_code == 403 and "no PriorityClass with name missing" in r.json()["message"]
