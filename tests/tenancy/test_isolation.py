"""What a tenant's token can and cannot reach, and what a tenant can and cannot make the
host do. Every refusal here is a request a real client sends (kubectl, the official
client, raw HTTP for the paths clients never build)."""

from __future__ import annotations

import http.client
import json
import ssl
import threading

import pytest
import yaml
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch
from tenancy_support import Kubectl, pod_manifest, wait_for


@pytest.fixture(scope="module")
def tenants(platform):
    nlp = platform.tenant("nlp", "--queue", "nlp", "--priority-classes", "train,inference",
                          "--max-pods", "3")
    vision = platform.tenant("vision", "--queue", "vision")
    vision.apply(pod_manifest("vision-train"))
    vision.run("create", "secret", "generic", "vision-secret", "--from-literal=k=v")
    wait_for(lambda: platform.host.json("get", "pods", "-n", "vc-vision")["items"], 60,
             "vision's host pod")
    return nlp, vision


def _token_and_server(kubectl: Kubectl) -> tuple[str, str, str]:
    cfg = yaml.safe_load(kubectl.kubeconfig.read_text())
    return (cfg["users"][0]["user"]["token"], cfg["clusters"][0]["cluster"]["server"],
            cfg["clusters"][0]["cluster"]["certificate-authority-data"])


def _raw(kubectl: Kubectl, method: str, path: str, headers: dict[str, str] | None = None,
         body: dict | None = None) -> tuple[int, str]:
    """One request with the exact path given (no client normalises it first)."""
    import base64
    import tempfile

    token, server, ca = _token_and_server(kubectl)
    hostport = server.split("://", 1)[1].split("/", 1)[0]
    host, port = hostport.rsplit(":", 1)
    with tempfile.NamedTemporaryFile("wb", suffix=".crt") as f:
        f.write(base64.b64decode(ca))
        f.flush()
        context = ssl.create_default_context(cafile=f.name)
        conn = http.client.HTTPSConnection(host, int(port), context=context, timeout=10)
        conn.request(method, path, body=json.dumps(body) if body else None,
                     headers={"Authorization": f"Bearer {token}",
                              "Content-Type": "application/json", **(headers or {})})
        response = conn.getresponse()
        text = response.read().decode()
        conn.close()
    return response.status, text


HOST_AND_OTHER_PATHS = [
    "/api/v1/pods",
    "/api/v1/namespaces/vc-vision/pods",
    "/api/v1/namespaces/default/secrets",
    "/apis/scheduling.run.ai/v2/queues",
    "/apis/tenancy.gpushare.io/v1alpha1/virtualclusters",
    "/api/v1/nodes",
    "/clusters/root/api/v1/pods",
    "/clusters/vision/api/v1/pods",
    "/clusters/vision/api/v1/namespaces/default/pods/vision-train",
    "/clusters/vision/api/v1/namespaces/default/pods/vision-train/log",
    "/clusters/vision/api/v1/namespaces/default/secrets/vision-secret",
    "/clusters/vision/api/v1/pods?watch=true",
    "/clusters/nlp/../vision/api/v1/pods",
    "/clusters/nlp/..%2Fvision/api/v1/pods",
    "/clusters/nlp%2F..%2Fvision/api/v1/pods",
    "/clusters/nlp/%2E%2E/%2E%2E/api/v1/pods",
    "/clusters/nlp/../../api/v1/pods",
    "/clusters/Vision/api/v1/pods",
    "/clusters//api/v1/pods",
    "/clusters/vision%00/api/v1/pods",
]


@pytest.mark.parametrize("path", HOST_AND_OTHER_PATHS)
def test_a_tenant_token_reads_nothing_of_the_host_or_another_tenant(tenants, path):
    nlp, _vision = tenants
    status, text = _raw(nlp, "GET", path)
    assert "vision-train" not in text and "vision-secret" not in text
    if status == 200 and not path.startswith("/clusters/"):
        # Without a prefix the token is served in its own cluster (kubectl get --raw
        # drops the prefix): exactly what the tenant's own endpoint answers.
        own_status, own = _raw(nlp, "GET", "/clusters/nlp" + path)
        assert own_status == 200
        assert _names(text) == _names(own), (text, own)
        return
    assert status in (400, 401, 403, 404), (status, text)


def _names(text: str) -> list[str]:
    return sorted(i["metadata"]["name"] for i in json.loads(text).get("items", []))


@pytest.mark.parametrize("method,path", [
    ("POST", "/clusters/vision/api/v1/namespaces/default/pods"),
    ("POST", "/api/v1/namespaces/vc-nlp/pods"),
    ("POST", "/api/v1/namespaces"),
    ("DELETE", "/clusters/vision/api/v1/namespaces/default/pods/vision-train"),
    ("DELETE", "/api/v1/namespaces/vc-vision/pods"),
    ("DELETE", "/apis/tenancy.gpushare.io/v1alpha1/virtualclusters/vision"),
    ("PATCH", "/apis/scheduling.run.ai/v2/queues/nlp"),
    ("POST", "/clusters/vision/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"),
])
def test_a_tenant_token_writes_nothing_of_the_host_or_another_tenant(tenants, platform,
                                                                     method, path):
    nlp, _vision = tenants
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "intruder"},
            "spec": {"containers": [{"name": "c", "image": "x"}]}}
    status, text = _raw(nlp, method, path, body=body)
    # without a prefix: the tenant's own cluster (an empty namespace of its own there)
    allowed = (400, 401, 403, 404, 405) + (() if path.startswith("/clusters/") else (200,))
    assert status in allowed, (status, text)
    assert platform.host.json("get", "pod", "-n", "vc-vision", "-l",
                              "tenancy.gpushare.io/name=vision-train")["items"]
    assert platform.host.json("get", "virtualcluster", "vision")


@pytest.mark.parametrize("headers", [
    {"Impersonate-User": "admin"},
    {"Impersonate-User": "admin", "Impersonate-Group": "system:masters"},
    {"Impersonate-User": "vision-admin"},
])
def test_a_tenant_admin_cannot_impersonate(tenants, headers):
    nlp, _vision = tenants
    for path in ("/clusters/nlp/api/v1/pods", "/api/v1/pods", "/clusters/vision/api/v1/pods"):
        status, text = _raw(nlp, "GET", path, headers=headers)
        assert status in (401, 403), (path, status, text)


def test_kubectl_in_a_tenant_sees_only_its_own_cluster(tenants):
    nlp, _vision = tenants
    # Its own cluster works like a cluster of its own...
    nlp.run("create", "namespace", "research")
    nlp.run("create", "configmap", "settings", "-n", "research", "--from-literal=a=1")
    assert nlp.run("auth", "can-i", "create", "clusterroles").stdout.strip() == "yes"
    # ... and guessed names of the other tenant's or the host's objects do not exist there.
    for args in (("get", "pod", "vision-train"), ("get", "secret", "vision-secret"),
                 ("get", "pods", "-n", "vc-vision"), ("get", "namespace", "vc-vision"),
                 ("get", "virtualclusters"), ("get", "queue", "vision"),
                 ("get", "queue", "ml-org")):
        done = nlp.run(*args, check=False)
        assert done.returncode != 0 or "vision" not in done.stdout, (args, done.stdout)
    assert nlp.json("get", "pods", "-A")["items"] == []
    assert [n["metadata"]["name"] for n in nlp.json("get", "namespaces")["items"]] == sorted(
        ["default", "kube-node-lease", "kube-public", "kube-system", "research"])
    # Another tenant's endpoint with this token: refused.
    _token, server, _ = _token_and_server(nlp)
    other = server.replace("/clusters/nlp", "/clusters/vision")
    done = nlp.run("--server", other, "get", "pods", check=False)
    assert done.returncode != 0 and "vision-train" not in done.stdout
    # The host's root address with this token: the tenant's own cluster again, never the
    # host's (its pods, namespaces and VirtualClusters stay out of sight).
    root = server.split("/clusters/")[0]
    assert nlp.json("--server", root, "get", "pods", "-A")["items"] == []
    assert "vc-vision" not in nlp.run("--server", root, "get", "namespaces").stdout
    done = nlp.run("--server", root + "/clusters/root", "get", "pods", "-A", check=False)
    assert done.returncode != 0 and "vision-train" not in done.stdout


def test_the_official_client_lists_and_watches_only_the_tenant(tenants, platform):
    nlp, vision = tenants
    api_client = k8s_config.new_client_from_config(str(nlp.kubeconfig))
    core = k8s_client.CoreV1Api(api_client)
    assert core.list_pod_for_all_namespaces().items == []
    seen: list[str] = []
    stop = threading.Event()

    def watch() -> None:
        w = k8s_watch.Watch()
        for event in w.stream(core.list_pod_for_all_namespaces, timeout_seconds=8):
            seen.append(event["object"].metadata.name)
            if stop.is_set():
                w.stop()

    thread = threading.Thread(target=watch)
    thread.start()
    vision.apply(pod_manifest("vision-second"))
    platform.host.apply(pod_manifest("host-pod", queue="nlp"))
    thread.join(15)
    stop.set()
    assert seen == []
    with pytest.raises(k8s_client.ApiException) as failure:
        k8s_client.CoreV1Api(k8s_config.new_client_from_config(
            str(nlp.kubeconfig))).read_namespaced_pod("vision-train", "default")
    assert failure.value.status == 404
    api_client.close()
    vision.run("delete", "pod", "vision-second", "--wait=false")
    platform.host.run("delete", "pod", "host-pod", "--wait=false")


def _host_inventory(platform) -> dict[str, list[str]]:
    out = {}
    for kind in ("namespaces", "nodes", "queues", "priorityclasses", "clusterroles",
                 "clusterrolebindings", "customresourcedefinitions"):
        out[kind] = sorted(o["metadata"]["name"] for o in platform.host.json("get", kind)["items"])
    for kind in ("pods", "configmaps", "secrets", "podgroups"):
        out[kind] = sorted(f"{o['metadata']['namespace']}/{o['metadata']['name']}"
                           for o in platform.host.json("get", kind, "-A")["items"]
                           if o["metadata"]["namespace"] != "vc-nlp")
    return out


def test_a_tenant_admin_reaches_the_host_only_through_the_syncer(tenants, platform):
    nlp, _vision = tenants
    before = _host_inventory(platform)
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "fake-gpu-box"},
            "status": {"capacity": {"nvidia.com/gpu": "8"}}}
    refused = {
        "a Node": yaml.safe_dump(node),
        "a Queue": "apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: mine}\n"
                   "spec: {resources: {gpu: {quota: 8}}}\n",
        "a PriorityClass": "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\n"
                           "metadata: {name: top}\nvalue: 1000000\n",
        "nodeName": pod_manifest("pinned").replace("  restartPolicy: Never",
                                                   "  restartPolicy: Never\n  nodeName: box"),
        "hostPath": pod_manifest("hostpath").replace(
            "  restartPolicy: Never",
            "  restartPolicy: Never\n  volumes: [{name: root, hostPath: {path: /}}]"),
        "privileged": pod_manifest("priv").replace(
            "    image: python", "    image: python\n    securityContext: {privileged: true}"),
        "hostNetwork": pod_manifest("net").replace("  restartPolicy: Never",
                                                   "  restartPolicy: Never\n  hostNetwork: true"),
        "another queue": pod_manifest("other", queue="vision"),
        "a class outside the list": pod_manifest("prio").replace(
            "  restartPolicy: Never", "  restartPolicy: Never\n  priorityClassName: build"),
    }
    for what, manifest in refused.items():
        done = nlp.run("create", "-f", "-", stdin=manifest, check=False)
        assert done.returncode != 0, f"{what} was accepted"
        assert "forbidden" in done.stderr.lower(), (what, done.stderr)
    # A pod that forges whose it is: the host copy says the truth.
    forged = pod_manifest("forger", extra_labels=", tenancy.gpushare.io/tenant: vision, "
                          "kai.scheduler/skip-podgrouper: 'false'")
    nlp.run("create", "-f", "-", stdin=forged)
    host_pod = wait_for(lambda: platform.host.json("get", "pods", "-n", "vc-nlp")["items"], 60,
                        "the forger's host pod")[0]
    labels = host_pod["metadata"]["labels"]
    assert labels["tenancy.gpushare.io/tenant"] == "nlp"
    assert labels["kai.scheduler/queue"] == "nlp"
    assert host_pod["metadata"]["namespace"] == "vc-nlp"
    assert "volumes" not in host_pod["spec"] and not host_pod["spec"].get("hostNetwork")
    assert _host_inventory(platform) == before
    nlp.run("delete", "pod", "forger", "--wait=false")


def test_another_queue_is_refused_naming_the_allowed_queue(tenants):
    nlp, _vision = tenants
    done = nlp.run("create", "-f", "-", stdin=pod_manifest("sneaky", queue="vision"),
                   check=False)
    assert done.returncode != 0
    assert "queue 'vision' is not allowed" in done.stderr
    assert "allowed queue(s): nlp" in done.stderr
    job = """
apiVersion: batch/v1
kind: Job
metadata: {name: sneaky-job, namespace: default}
spec:
  template:
    metadata: {labels: {kai.scheduler/queue: recsys}}
    spec:
      restartPolicy: Never
      containers: [{name: c, image: python, command: [python3, -c, pass]}]
"""
    done = nlp.run("create", "-f", "-", stdin=job, check=False)
    assert done.returncode != 0 and "allowed queue(s): nlp" in done.stderr
    done = nlp.run("create", "-f", "-", stdin=pod_manifest("p").replace(
        "  restartPolicy: Never", "  restartPolicy: Never\n  priorityClassName: build"),
        check=False)
    assert done.returncode != 0 and "allowed priority classes: train, inference" in done.stderr


def test_max_pods_is_enforced(tenants, platform):
    nlp, _vision = tenants
    for i in range(3):
        nlp.apply(pod_manifest(f"fill-{i}", fraction="0.01"))
    done = nlp.run("create", "-f", "-", stdin=pod_manifest("one-too-many"), check=False)
    assert done.returncode != 0 and "at most 3 live pods (maxPods)" in done.stderr
    for i in range(3):
        nlp.run("delete", "pod", f"fill-{i}", "--wait=false")


def test_a_read_only_colleague_is_really_read_only(tenants, platform, tmp_path):
    nlp, _vision = tenants
    nlp.run("create", "clusterrolebinding", "alice-view", "--clusterrole=view", "--user=alice")
    path = tmp_path / "alice.kubeconfig"
    platform.gpushare("tenant", "kubeconfig", "nlp", "--user", "alice", "--data-dir",
                      str(platform.data), "-o", str(path))
    alice = Kubectl(path)
    alice.run("get", "pods", "-A")
    alice.run("get", "nodes")
    assert alice.run("auth", "can-i", "create", "pods", check=False).stdout.strip() == "no"
    for args in (("run", "x", "--image=python", "--", "true"),
                 ("create", "configmap", "c", "--from-literal=a=b"),
                 ("delete", "namespace", "research"),
                 ("get", "secrets"),
                 ("create", "clusterrolebinding", "me-admin", "--clusterrole=cluster-admin",
                  "--user=alice")):
        done = alice.run(*args, check=False)
        assert done.returncode != 0 and "forbidden" in done.stderr.lower(), (args, done.stderr)
    # Alice's token is valid in nlp only.
    _token, server, _ = _token_and_server(alice)
    done = alice.run("--server", server.replace("/clusters/nlp", "/clusters/vision"), "get",
                     "pods", check=False)
    assert done.returncode != 0
