"""Create, get, list, patch and delete one object of every kind the server serves."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from apiserver_harness import Cluster, http_client

from gpushare.apiserver.registry.builtin_kinds import builtin_resources

TEMPLATE = {"metadata": {"labels": {"app": "x"}},
            "spec": {"restartPolicy": "Never",
                     "containers": [{"name": "c", "image": "busybox"}]}}
SELECTED = {"selector": {"matchLabels": {"app": "x"}}, "template": TEMPLATE}

BODIES: dict[str, dict[str, Any]] = {
    "namespaces": {},
    "nodes": {"status": {"capacity": {"nvidia.com/gpu": "1"}}},
    "pods": {"spec": TEMPLATE["spec"]},
    "events": {"involvedObject": {"kind": "Pod", "name": "p"}, "reason": "R"},
    "configmaps": {"data": {"k": "v"}},
    "secrets": {"stringData": {"k": "v"}},
    "serviceaccounts": {},
    "services": {"spec": {"ports": [{"port": 80}]}},
    "priorityclasses": {"value": 7},
    "leases": {"spec": {"holderIdentity": "node-1", "leaseDurationSeconds": 40}},
    "jobs": {"spec": {"template": TEMPLATE}},
    "cronjobs": {"spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {
        "template": TEMPLATE}}}},
    "deployments": {"spec": SELECTED},
    "replicasets": {"spec": SELECTED},
    "statefulsets": {"spec": {**SELECTED, "serviceName": "x"}},
    "daemonsets": {"spec": SELECTED},
    "poddisruptionbudgets": {"spec": {"minAvailable": 1,
                                      "selector": {"matchLabels": {"app": "x"}}}},
    "roles": {"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]},
    "clusterroles": {"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]},
    "rolebindings": {"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                 "name": "r"}, "subjects": [{"kind": "User", "name": "u"}]},
    "clusterrolebindings": {"roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                        "kind": "ClusterRole", "name": "r"},
                            "subjects": [{"kind": "User", "name": "u"}]},
    "customresourcedefinitions": {"spec": {
        "group": "kinds.example.com", "scope": "Cluster",
        "names": {"plural": "things", "kind": "Thing"},
        "versions": [{"name": "v1", "served": True, "storage": True}]}},
    "resourcequotas": {"spec": {"hard": {"pods": "10"}}},
    "limitranges": {"spec": {"limits": [{"type": "Container", "max": {"cpu": "2"}}]}},
    "replicationcontrollers": {"spec": {"selector": {"app": "x"}, "template": TEMPLATE}},
    "podtemplates": {"template": TEMPLATE},
    "endpoints": {"subsets": [{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80}]}]},
    "controllerrevisions": {"revision": 1, "data": {"spec": {}}},
    # no rules: stored and read back, never called
    "mutatingwebhookconfigurations": {"webhooks": [{
        "name": "none.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
        "failurePolicy": "Ignore", "clientConfig": {"url": "https://localhost:1/"}}]},
    "endpointslices": {"addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.1"]}],
                       "ports": [{"port": 80}]},
    "ingresses": {"spec": {"defaultBackend": {"service": {"name": "s",
                                                          "port": {"number": 80}}}}},
    "ingressclasses": {"spec": {"controller": "example.com/ingress"}},
    "runtimeclasses": {"handler": "runc"},
    "certificatesigningrequests": {"spec": {
        "request": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0K",
        "signerName": "example.com/signer", "usages": ["client auth"]}},
    "queues": {"spec": {"resources": {"gpu": {"quota": 1, "limit": -1}}}},
    "podgroups": {"spec": {"minMember": 2, "queue": "q"}},
}
NAMES = {"customresourcedefinitions": "things.kinds.example.com"}
KINDS = [(i.group, i.version, i.resource, i.kind, i.namespaced) for i in builtin_resources()
         if "create" in i.verbs and "get" in i.verbs]
KINDS += [("scheduling.run.ai", "v2", "queues", "Queue", False),
          ("scheduling.run.ai", "v2alpha2", "podgroups", "PodGroup", True)]


@pytest.fixture(scope="module")
def http(cluster: Cluster) -> Iterator[httpx.Client]:
    with http_client(cluster.server) as c:
        yield c


def test_every_builtin_kind_is_covered() -> None:
    assert {k[2] for k in KINDS} == set(BODIES)


@pytest.mark.parametrize(("group", "version", "resource", "kind", "namespaced"), KINDS,
                         ids=[k[2] for k in KINDS])
def test_crud(http: httpx.Client, group: str, version: str, resource: str, kind: str,
              namespaced: bool) -> None:
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    collection = f"{base}/namespaces/default/{resource}" if namespaced else f"{base}/{resource}"
    name = NAMES.get(resource, f"crud-{resource}")
    api_version = f"{group}/{version}" if group else version
    body = {"apiVersion": api_version, "kind": kind, "metadata": {"name": name},
            **BODIES[resource]}
    r = http.post(collection, json=body)
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["metadata"]["uid"] and created["metadata"]["resourceVersion"]
    got = http.get(f"{collection}/{name}")
    assert got.status_code == 200 and got.json()["kind"] == kind
    listed = http.get(collection).json()
    assert listed["kind"] == f"{kind}List"
    assert name in {o["metadata"]["name"] for o in listed["items"]}
    patched = http.patch(f"{collection}/{name}", content=b'{"metadata":{"labels":{"p":"1"}}}',
                         headers={"Content-Type": "application/merge-patch+json"})
    assert patched.status_code == 200, patched.text
    assert patched.json()["metadata"]["labels"]["p"] == "1"
    assert int(patched.json()["metadata"]["resourceVersion"]) > int(
        created["metadata"]["resourceVersion"])
    deleted = http.delete(f"{collection}/{name}")
    assert deleted.status_code in (200, 202), deleted.text
    if resource == "namespaces":
        return  # terminating; removed by the garbage collector
    assert http.get(f"{collection}/{name}").status_code == 404
