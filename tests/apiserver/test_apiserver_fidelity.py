"""Kubernetes fidelity against kubectl and the official client: schemas of built-in kinds in
OpenAPI (explain), strategic merge patch by type, server-side apply field ownership, the
kinds kubectl's create subcommands send, and Kubernetes' Status shapes."""

from __future__ import annotations

import json

from apiserver_harness import Cluster

SERVICE = """
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports:
  - {name: http, port: 80, targetPort: 8080}
"""


def _get(cluster: Cluster, *what: str) -> dict:
    return json.loads(cluster.kubectl("get", *what, "-o", "json", "--show-managed-fields").stdout)


def test_explain_builtin_kinds(cluster: Cluster) -> None:
    out = cluster.kubectl("explain", "pod.spec").stdout
    assert "KIND:       Pod" in out
    assert "containers\t<[]Container> -required-" in out
    assert "schedulerName\t<string>" in out
    ports = cluster.kubectl("explain", "service.spec.ports").stdout
    assert "FIELD: ports <[]ServicePort>" in ports
    assert "Number or name of the port" in cluster.kubectl(
        "explain", "service.spec.ports.targetPort").stdout
    assert "Deployment" in cluster.kubectl("explain", "deployments.spec.strategy").stdout
    v2 = json.loads(cluster.kubectl("get", "--raw", "/openapi/v2").stdout)
    service_ports = v2["definitions"]["io.k8s.api.core.v1.ServiceSpec"]["properties"]["ports"]
    assert service_ports["x-kubernetes-patch-merge-key"] == "port"
    assert service_ports["items"] == {"$ref": "#/definitions/io.k8s.api.core.v1.ServicePort"}


def test_strategic_merge_uses_the_merge_keys_of_the_type(cluster: Cluster) -> None:
    cluster.kubectl("apply", "-f", "-", stdin=SERVICE)
    cluster.kubectl("patch", "service", "web", "-p",
                    json.dumps({"spec": {"ports": [{"name": "https", "port": 443}]}}))
    ports = _get(cluster, "service", "web")["spec"]["ports"]
    assert [(p["name"], p["port"]) for p in ports] == [("http", 80), ("https", 443)]
    cluster.kubectl("patch", "service", "web", "-p",
                    json.dumps({"spec": {"ports": [{"port": 80, "targetPort": 9090}]}}))
    ports = _get(cluster, "service", "web")["spec"]["ports"]
    assert [(p["port"], p.get("targetPort")) for p in ports] == [(80, 9090), (443, 443)]
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "tainted"},
            "spec": {"taints": [{"key": "a", "value": "1", "effect": "NoSchedule"}]}}
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(node))
    cluster.kubectl("patch", "node", "tainted", "-p", json.dumps(
        {"spec": {"taints": [{"key": "b", "value": "2", "effect": "NoSchedule"}]}}))
    # NodeSpec.taints has no patch strategy: the list is replaced, as Kubernetes does.
    assert _get(cluster, "node", "tainted")["spec"]["taints"] == [
        {"key": "b", "value": "2", "effect": "NoSchedule"}]
    cluster.kubectl("delete", "node", "tainted")
    cluster.kubectl("delete", "service", "web")


CONFIG = """
apiVersion: v1
kind: ConfigMap
metadata: {name: owned, labels: {team: nlp}}
data: {a: "1", b: "2"}
"""


def _managers(obj: dict) -> dict[str, dict]:
    return {f"{e['manager']}/{e['operation']}": e["fieldsV1"]
            for e in obj["metadata"].get("managedFields") or ()}


def test_server_side_apply_owns_removes_and_conflicts(cluster: Cluster) -> None:
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=CONFIG)
    cm = _get(cluster, "configmap", "owned")
    fields = _managers(cm)["kubectl/Apply"]
    assert fields["f:data"] == {"f:a": {}, "f:b": {}}
    assert fields["f:metadata"] == {"f:labels": {"f:team": {}}}
    # A field dropped from the manifest is removed.
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=CONFIG.replace(', b: "2"', ""))
    assert _get(cluster, "configmap", "owned")["data"] == {"a": "1"}
    # Another manager setting a different value conflicts, naming field and manager.
    other = CONFIG.replace('a: "1", b: "2"', 'a: "9"')
    done = cluster.kubectl("apply", "--server-side", "--field-manager=gitops", "-f", "-",
                           stdin=other, check=False)
    assert done.returncode != 0
    assert 'conflict with "kubectl"' in done.stderr and ".data.a" in done.stderr
    assert _get(cluster, "configmap", "owned")["data"] == {"a": "1"}
    # Same value: shared ownership, no conflict; then force takes the field over.
    cluster.kubectl("apply", "--server-side", "--field-manager=gitops", "-f", "-",
                    stdin=CONFIG.replace('a: "1", b: "2"', 'a: "1"'))
    cluster.kubectl("apply", "--server-side", "--field-manager=gitops", "--force-conflicts",
                    "-f", "-", stdin=other)
    cm = _get(cluster, "configmap", "owned")
    assert cm["data"] == {"a": "9"}
    assert "f:data" not in _managers(cm)["kubectl/Apply"]
    # An ordinary patch is recorded under its manager and takes the fields it changed.
    cluster.kubectl("patch", "configmap", "owned", "--type=merge", "-p",
                    json.dumps({"data": {"c": "3"}}))
    cm = _get(cluster, "configmap", "owned")
    assert _managers(cm)["kubectl-patch/Update"] == {"f:data": {"f:c": {}}}
    # kubectl drops everything it applied: what gitops (data.a, the shared label) and
    # kubectl-patch (data.c) own stays.
    cluster.kubectl("apply", "--server-side", "-f", "-",
                    stdin="apiVersion: v1\nkind: ConfigMap\nmetadata: {name: owned}\n")
    cm = _get(cluster, "configmap", "owned")
    assert cm["data"] == {"a": "9", "c": "3"} and cm["metadata"]["labels"] == {"team": "nlp"}
    cluster.kubectl("apply", "--server-side", "--field-manager=gitops", "-f", "-",
                    stdin="apiVersion: v1\nkind: ConfigMap\nmetadata: {name: owned}\n")
    cm = _get(cluster, "configmap", "owned")
    assert cm["data"] == {"c": "3"} and not cm["metadata"].get("labels")
    cluster.kubectl("delete", "configmap", "owned")


def test_server_side_apply_with_the_official_client(cluster: Cluster) -> None:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    apps = client.AppsV1Api(cluster.api_client())
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "ssa"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "ssa"}},
                 "template": {"metadata": {"labels": {"app": "ssa"}}, "spec": {
                     "containers": [{"name": "main", "image": "busybox:1",
                                     "env": [{"name": "A", "value": "1"}]}]}}}}
    apps.patch_namespaced_deployment("ssa", "default", deployment, field_manager="ci",
                                     _content_type="application/apply-patch+yaml")
    deployment["spec"]["template"]["spec"]["containers"][0]["image"] = "busybox:2"
    deployment["spec"]["replicas"] = 3
    try:
        apps.patch_namespaced_deployment("ssa", "default", deployment, field_manager="cd",
                                         _content_type="application/apply-patch+yaml")
        raise AssertionError("a conflicting apply was accepted")
    except ApiException as e:
        assert e.status == 409
        status = json.loads(e.body)
        fields = {c["field"] for c in status["details"]["causes"]}
        assert fields == {".spec.replicas",
                          '.spec.template.spec.containers[name="main"].image'}
    updated = apps.patch_namespaced_deployment("ssa", "default", deployment, field_manager="cd",
                                               force=True,
                                               _content_type="application/apply-patch+yaml")
    assert updated.spec.replicas == 3
    owners = {e.manager: e.fields_v1 for e in updated.metadata.managed_fields}
    container = owners["cd"]["f:spec"]["f:template"]["f:spec"]["f:containers"][
        'k:{"name":"main"}']
    assert "f:image" in container and "f:env" in container
    assert "f:replicas" not in owners["ci"]["f:spec"]
    apps.delete_namespaced_deployment("ssa", "default")


def test_kubectl_create_subcommands(cluster: Cluster) -> None:
    # Each of these sends a protobuf body of its kind.
    cluster.kubectl("create", "service", "clusterip", "db", "--tcp=5432:5432")
    svc = _get(cluster, "service", "db")
    assert svc["spec"]["ports"][0]["port"] == 5432
    assert svc["spec"]["ports"][0]["targetPort"] == 5432
    assert svc["spec"]["selector"] == {"app": "db"} and svc["spec"]["type"] == "ClusterIP"
    cluster.kubectl("create", "service", "externalname", "ext", "--external-name=db.example")
    assert _get(cluster, "service", "ext")["spec"]["externalName"] == "db.example"
    cluster.kubectl("create", "pdb", "db", "--selector=app=db", "--min-available=50%")
    pdb = _get(cluster, "pdb", "db")
    assert pdb["spec"]["minAvailable"] == "50%"
    assert pdb["spec"]["selector"] == {"matchLabels": {"app": "db"}}
    cluster.kubectl("create", "quota", "small", "--hard=cpu=2,nvidia.com/gpu=1,pods=10")
    quota = _get(cluster, "resourcequota", "small")
    assert quota["spec"]["hard"] == {"cpu": "2", "nvidia.com/gpu": "1", "pods": "10"}
    cluster.kubectl("create", "ingress", "web", "--class=default",
                    "--rule=web.example/api*=db:5432,tls=web-cert")
    ing = _get(cluster, "ingress", "web")
    assert ing["spec"]["ingressClassName"] == "default"
    rule = ing["spec"]["rules"][0]
    assert rule["host"] == "web.example"
    path = rule["http"]["paths"][0]
    assert path["path"] == "/api" and path["pathType"] == "Prefix"
    assert path["backend"] == {"service": {"name": "db", "port": {"number": 5432}}}
    assert ing["spec"]["tls"] == [{"hosts": ["web.example"], "secretName": "web-cert"}]
    cluster.kubectl("apply", "-f", "-", stdin=(
        "apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {name: default}\n"
        "spec: {controller: example.com/ingress}\n"))
    assert "default" in cluster.kubectl("get", "ingressclasses").stdout
    for what in (("service", "db"), ("service", "ext"), ("pdb", "db"), ("quota", "small"),
                 ("ingress", "web"), ("ingressclass", "default")):
        cluster.kubectl("delete", *what)


def test_extended_resources_must_be_whole(cluster: Cluster) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "half"},
           "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {
               "limits": {"nvidia.com/gpu": "0.5"}}}]}}
    done = cluster.kubectl("apply", "-f", "-", stdin=json.dumps(pod), check=False)
    assert done.returncode != 0
    assert ('spec.containers[0].resources.limits[nvidia.com/gpu]: Invalid value: "0.5": '
            "must be an integer") in done.stderr
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "2"},
                                                 "requests": {"nvidia.com/gpu": "1"}}
    done = cluster.kubectl("apply", "-f", "-", stdin=json.dumps(pod), check=False)
    assert done.returncode != 0 and "must be equal to nvidia.com/gpu limit of 2" in done.stderr
    assert cluster.kubectl("get", "pod", "half", check=False).returncode != 0


def test_auth_whoami_and_can_i_list(cluster: Cluster) -> None:
    who = cluster.kubectl("auth", "whoami", "-o", "json").stdout
    info = json.loads(who)["status"]["userInfo"]
    assert "system:masters" in info["groups"]
    listing = cluster.kubectl("auth", "can-i", "--list").stdout
    assert "*.*" in listing and "[*]" in listing
    cluster.kubectl("create", "role", "reader", "--verb=get,list", "--resource=pods")
    cluster.kubectl("create", "rolebinding", "alice-reads", "--role=reader", "--user=alice")
    mine = cluster.kubectl("auth", "can-i", "--list", "--as=alice").stdout
    row = next(line for line in mine.splitlines() if line.startswith("pods "))
    assert "[get list]" in row
    assert "configmaps" not in mine
    cluster.kubectl("delete", "rolebinding", "alice-reads")
    cluster.kubectl("delete", "role", "reader")


def test_status_shapes(cluster: Cluster) -> None:
    from apiserver_harness import http_client

    http = http_client(cluster.server)
    queue = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
             "metadata": {"name": "gone"}, "spec": {"resources": {"gpu": {"quota": 1}}}}
    assert http.post("/apis/scheduling.run.ai/v2/queues", json=queue).status_code == 201
    deleted = http.delete("/apis/scheduling.run.ai/v2/queues/gone").json()
    assert deleted["kind"] == "Status" and deleted["status"] == "Success"
    assert deleted["details"]["name"] == "gone" and deleted["details"]["kind"] == "queues"
    http.post("/api/v1/namespaces/default/configmaps",
              json={"metadata": {"name": "jp"}, "data": {"a": "1"}})
    bad = http.patch("/api/v1/namespaces/default/configmaps/jp",
                     content=json.dumps([{"op": "remove", "path": "/data/nope"}]),
                     headers={"content-type": "application/json-patch+json"})
    assert bad.status_code == 422
    status = bad.json()
    assert status["kind"] == "Status" and status["reason"] == "Invalid"
    assert status["message"] == ('jsonpatch remove operation does not apply: doc is missing '
                                 'path: "/data/nope": missing value')
    http.delete("/api/v1/namespaces/default/configmaps/jp")
    http.close()


def test_conformance_setup_and_core_rules(cluster: Cluster) -> None:
    from apiserver_harness import http_client

    http = http_client(cluster.server)
    http.post("/api/v1/nodes", json={"metadata": {"name": "plain"}})
    listed = http.get("/api/v1/nodes", params={"fieldSelector": "spec.unschedulable=false"})
    assert "plain" in {n["metadata"]["name"] for n in listed.json()["items"]}
    http.delete("/api/v1/nodes/plain")
    svc = _get(cluster, "service", "kubernetes", "-n", "default")
    assert svc["spec"]["ports"][0]["port"] == 443
    # Secrets and ConfigMaps: keys must be valid; immutable ones stay as they are.
    bad = http.post("/api/v1/namespaces/default/secrets",
                    json={"metadata": {"name": "empty-key"}, "data": {"": "dmFsdWU="}})
    assert bad.status_code == 422 and bad.json()["details"]["causes"][0]["field"] == "data[]"
    cluster.kubectl("apply", "-f", "-", stdin=(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: frozen}\nimmutable: true\n"
        "data: {a: '1'}\n"))
    done = cluster.kubectl("patch", "configmap", "frozen", "--type=merge", "-p",
                           '{"data": {"a": "2"}}', check=False)
    assert done.returncode != 0 and "field is immutable when `immutable` is set" in done.stderr
    done = cluster.kubectl("patch", "configmap", "frozen", "--type=merge", "-p",
                           '{"immutable": false}', check=False)
    assert done.returncode != 0
    cluster.kubectl("delete", "configmap", "frozen")
    # A client that accepts only Tables of a version that is not served gets 406.
    table = http.get("/api/v1/namespaces/default/services",
                     headers={"Accept": "application/json;as=Table;v=v1beta1;g=meta.k8s.io"})
    assert table.status_code == 406 and table.json()["reason"] == "NotAcceptable"
    http.close()


def test_events_api_shares_core_storage(cluster: Cluster) -> None:
    from apiserver_harness import http_client

    http = http_client(cluster.server)
    event = {"apiVersion": "events.k8s.io/v1", "kind": "Event",
             "metadata": {"name": "e1", "labels": {"test": "ev"}},
             "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "me",
             "reportingInstance": "me-1", "action": "Test", "reason": "Testing",
             "note": "hello", "type": "Normal",
             "regarding": {"kind": "Pod", "name": "p", "namespace": "default"}}
    created = http.post("/apis/events.k8s.io/v1/namespaces/default/events", json=event)
    assert created.status_code == 201, created.text
    assert created.json()["note"] == "hello"
    core = http.get("/api/v1/namespaces/default/events/e1").json()
    assert core["message"] == "hello" and core["involvedObject"]["name"] == "p"
    assert core["apiVersion"] == "v1" and core["reportingComponent"] == "me"
    patched = http.patch("/apis/events.k8s.io/v1/namespaces/default/events/e1",
                         content=b'{"note": "changed"}',
                         headers={"content-type": "application/merge-patch+json"})
    assert patched.json()["note"] == "changed"
    assert http.get("/api/v1/namespaces/default/events/e1").json()["message"] == "changed"
    listed = cluster.kubectl("get", "events.events.k8s.io", "-l", "test=ev", "-o",
                             "json").stdout
    assert [e["note"] for e in json.loads(listed)["items"]] == ["changed"]
    gone = http.delete("/apis/events.k8s.io/v1/namespaces/default/events",
                       params={"labelSelector": "test=ev"})
    assert gone.status_code == 200
    assert http.get("/api/v1/namespaces/default/events/e1").status_code == 404
    http.close()


def test_replication_controllers_and_their_garbage(cluster: Cluster) -> None:
    import time

    rc = {"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "rc"},
          "spec": {"replicas": 1, "selector": {"app": "rc"}, "template": {
              "metadata": {"labels": {"app": "rc"}},
              "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(rc))
    owner = _get(cluster, "rc", "rc")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "rc-pod", "labels": {"app": "rc"}, "ownerReferences": [{
            "apiVersion": "v1", "kind": "ReplicationController", "name": "rc",
            "uid": owner["metadata"]["uid"], "controller": True}]},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(pod))
    assert "1" in cluster.kubectl("get", "rc", "rc", "-o", "jsonpath={.spec.replicas}").stdout
    cluster.kubectl("scale", "rc", "rc", "--replicas=3")
    assert _get(cluster, "rc", "rc")["spec"]["replicas"] == 3
    cluster.kubectl("delete", "rc", "rc")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if cluster.kubectl("get", "pod", "rc-pod", check=False).returncode != 0:
            break
        time.sleep(0.2)
    assert cluster.kubectl("get", "pod", "rc-pod", check=False).returncode != 0


def test_resource_quota_status_and_admission(cluster: Cluster) -> None:
    import time

    cluster.kubectl("create", "namespace", "quoted")
    cluster.kubectl("create", "quota", "q", "-n", "quoted",
                    "--hard=pods=1,requests.cpu=1,requests.nvidia.com/gpu=1,configmaps=5")
    quota = _get(cluster, "quota", "q", "-n", "quoted")
    assert quota["status"]["hard"]["pods"] == "1"
    assert quota["status"]["used"]["pods"] == "0"
    used_cm = int(quota["status"]["used"]["configmaps"])
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "namespace": "quoted"},
           "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {
               "requests": {"cpu": "500m"}, "limits": {"nvidia.com/gpu": "1"}}}]}}
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(pod))
    used = _get(cluster, "quota", "q", "-n", "quoted")["status"]["used"]
    assert used["pods"] == "1" and used["requests.cpu"] == "500m"
    assert used["requests.nvidia.com/gpu"] == "1"
    pod["metadata"]["name"] = "b"
    done = cluster.kubectl("apply", "-f", "-", stdin=json.dumps(pod), check=False)
    assert done.returncode != 0
    assert "exceeded quota: q, requested: pods=1" in done.stderr
    assert "limited: pods=1" in done.stderr
    no_cpu = {**pod, "metadata": {"name": "c", "namespace": "quoted"},
              "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    cluster.kubectl("delete", "pod", "a", "-n", "quoted", "--grace-period=0", "--force")
    done = cluster.kubectl("apply", "-f", "-", stdin=json.dumps(no_cpu), check=False)
    assert done.returncode != 0 and "failed quota: q: must specify requests.cpu" in done.stderr
    cluster.kubectl("create", "configmap", "one", "-n", "quoted")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        used = _get(cluster, "quota", "q", "-n", "quoted")["status"]["used"]
        if used["pods"] == "0":
            break
        time.sleep(0.1)
    assert used["pods"] == "0" and int(used["configmaps"]) == used_cm + 1
    cluster.kubectl("delete", "namespace", "quoted", "--wait=false")


WIDGET_CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.fidelity.example.com}
spec:
  group: fidelity.example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-validations:
            - rule: "self.replicas <= self.maxReplicas"
              message: "replicas may not exceed maxReplicas"
            - rule: "self.owner == oldSelf.owner"
              message: "owner is immutable"
            properties:
              owner: {type: string, pattern: "^[a-z]+$", maxLength: 8}
              email: {type: string, format: email}
              replicas: {type: integer}
              maxReplicas: {type: integer}
              tags: {type: array, maxItems: 2, uniqueItems: true, items: {type: string}}
              labels: {type: object, maxProperties: 1,
                       additionalProperties: {type: string}}
              size:
                oneOf:
                - {type: integer}
                - {type: string, enum: [small, large]}
"""


def _widget(spec: dict) -> str:
    return json.dumps({"apiVersion": "fidelity.example.com/v1", "kind": "Widget",
                       "metadata": {"name": "w"}, "spec": spec})


def test_crd_validation_keywords_and_cel_rules(cluster: Cluster) -> None:
    import time

    cluster.kubectl("apply", "-f", "-", stdin=WIDGET_CRD)
    deadline = time.monotonic() + 10
    while cluster.kubectl("get", "widgets", check=False).returncode != 0:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    good = {"owner": "alice", "email": "a@example.com", "replicas": 1, "maxReplicas": 2,
            "tags": ["a"], "labels": {"x": "1"}, "size": "small"}
    cluster.kubectl("apply", "-f", "-", stdin=_widget(good))
    bad = {"owner": "Alice-Long-Name", "email": "nope", "replicas": 3, "maxReplicas": 2,
           "tags": ["a", "a", "b"], "labels": {"x": "1", "y": "2"}, "size": "medium"}
    done = cluster.kubectl("replace", "-f", "-", stdin=_widget(bad), check=False)
    assert done.returncode != 0
    for expected in ("spec.owner: Invalid value: \"Alice-Long-Name\": spec.owner in body "
                     "should match '^[a-z]+$'",
                     "spec.owner: Too long: may not be more than 8 bytes",
                     "spec.email: Invalid value: \"nope\": spec.email in body must be of type "
                     "email",
                     "spec.tags: Too many: 3: must have at most 2 items",
                     "spec.tags[1]: Duplicate value",
                     "spec.labels: Too many: 2: must have at most 1 items",
                     "must validate one and only one schema (oneOf)"):
        assert expected in done.stderr, (expected, done.stderr)
    done = cluster.kubectl("replace", "-f", "-", stdin=_widget({**good, "replicas": 5}),
                           check=False)
    assert done.returncode != 0
    assert "spec: Invalid value: \"object\": replicas may not exceed maxReplicas" in done.stderr
    done = cluster.kubectl("replace", "-f", "-", stdin=_widget({**good, "owner": "bob"}),
                           check=False)
    assert done.returncode != 0 and "owner is immutable" in done.stderr
    cluster.kubectl("replace", "-f", "-", stdin=_widget({**good, "replicas": 2}))
    broken = WIDGET_CRD.replace("self.replicas <= self.maxReplicas", "self.replicas <=")
    done = cluster.kubectl("apply", "-f", "-", stdin=broken, check=False)
    assert done.returncode != 0 and "x-kubernetes-validations[0].rule" in done.stderr
    cluster.kubectl("delete", "crd", "widgets.fidelity.example.com")


def test_diff_and_server_side_dry_run(cluster: Cluster) -> None:
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=CONFIG)
    changed = CONFIG.replace('b: "2"', 'b: "3"')
    diff = cluster.kubectl("diff", "--server-side", "-f", "-", stdin=changed, check=False)
    assert diff.returncode == 1, diff.stderr  # 1: differences found
    assert '-  b: "2"' in diff.stdout and '+  b: "3"' in diff.stdout
    out = cluster.kubectl("apply", "--server-side", "--dry-run=server", "-f", "-",
                          stdin=changed).stdout
    assert "serverside-applied (server dry run)" in out
    assert _get(cluster, "configmap", "owned")["data"]["b"] == "2"
    bad_quota = ("apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: bad}\n"
                 "spec: {hard: {pods: lots}}\n")
    done = cluster.kubectl("apply", "-f", "-", stdin=bad_quota, check=False)
    assert done.returncode != 0 and "spec.hard[pods]" in done.stderr
    cluster.kubectl("delete", "configmap", "owned")


def test_services_get_cluster_ips_and_node_ports(cluster: Cluster) -> None:
    assert _get(cluster, "service", "kubernetes")["spec"]["clusterIP"] == "10.96.0.1"
    cluster.kubectl("create", "service", "nodeport", "np", "--tcp=80:8080")
    cluster.kubectl("create", "service", "clusterip", "headless", "--clusterip=None")
    np = _get(cluster, "service", "np")["spec"]
    assert np["clusterIP"].startswith("10.") and np["clusterIP"] != "10.96.0.1"
    assert np["clusterIPs"] == [np["clusterIP"]] and np["ipFamilies"] == ["IPv4"]
    assert 30000 <= np["ports"][0]["nodePort"] <= 32767
    assert _get(cluster, "service", "headless")["spec"]["clusterIP"] == "None"
    row = cluster.kubectl("get", "service", "np").stdout.splitlines()[1].split()
    assert row[2] == np["clusterIP"] and f"80:{np['ports'][0]['nodePort']}/TCP" in row[4]
    # Updates keep the allocations; the cluster IP cannot change.
    cluster.kubectl("label", "service", "np", "x=y")
    assert _get(cluster, "service", "np")["spec"]["clusterIP"] == np["clusterIP"]
    done = cluster.kubectl("patch", "service", "np", "-p",
                           '{"spec": {"clusterIP": "10.96.9.9"}}', check=False)
    assert done.returncode != 0 and "spec.clusterIP" in done.stderr
    cluster.kubectl("delete", "service", "np", "headless")


def test_a_volume_mount_must_name_a_volume_of_the_pod(cluster: Cluster) -> None:
    """As kube-apiserver: a mount of no volume is refused, in a pod and in a template (the
    tenancy syncer once made such host pods, which only a real cluster refused)."""
    from apiserver_harness import http_client

    http = http_client(cluster.server)
    container = {"name": "c", "image": "python",
                 "volumeMounts": [{"name": "data", "mountPath": "/data"},
                                  {"name": "kube-api-access-x1", "mountPath": "/var/run/t"}]}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dangling"},
           "spec": {"volumes": [{"name": "data", "emptyDir": {}}], "containers": [container]}}
    bad = http.post("/api/v1/namespaces/default/pods", json=pod)
    assert bad.status_code == 422, bad.text
    assert bad.json()["details"]["causes"] == [{
        "reason": "FieldValueNotFound", "message": 'Not found: "kube-api-access-x1"',
        "field": "spec.containers[0].volumeMounts[1].name"}]
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "dangling"},
           "spec": {"template": {"spec": {**pod["spec"], "restartPolicy": "Never"}}}}
    bad = http.post("/apis/batch/v1/namespaces/default/jobs", json=job)
    assert bad.status_code == 422, bad.text
    assert [c["field"] for c in bad.json()["details"]["causes"]] == [
        "spec.template.spec.containers[0].volumeMounts[1].name"]
    container["volumeMounts"] = container["volumeMounts"][:1]
    assert http.post("/api/v1/namespaces/default/pods", json=pod).status_code == 201
    http.close()
