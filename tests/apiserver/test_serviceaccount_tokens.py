"""ServiceAccount tokens: `kubectl create token`, their identity and RBAC, revocation,
TokenReview, logical-cluster binding, kube-root-ca.crt and the pod's projected token."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from apiserver_harness import Cluster, http_client

from gpushare.apiserver.auth.serviceaccounts import (
    API_AUDIENCE,
    CLUSTER_CLAIM,
    ISSUER,
    TOKEN_MOUNT_PATH,
)


@pytest.fixture(scope="module")
def http(cluster: Cluster) -> Iterator[httpx.Client]:
    with http_client(cluster.server) as c:
        yield c


def _token_kubeconfig(cluster: Cluster, token: str, path: Path, logical: str = "root") -> Path:
    server = cluster.server
    ca = base64.b64encode(server.ca_path.read_bytes()).decode()  # type: ignore[union-attr]
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "c", "cluster": {"server": server.cluster_url(logical),
                                               "certificate-authority-data": ca}}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa"}}]}))
    return path


def _claims(token: str) -> dict:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def _review(http: httpx.Client, token: str, audiences: list[str] | None = None) -> dict:
    spec: dict = {"token": token}
    if audiences is not None:
        spec["audiences"] = audiences
    r = http.post("/apis/authentication.k8s.io/v1/tokenreviews",
                  json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                        "spec": spec})
    assert r.status_code == 201, r.text
    return r.json()["status"]


def test_kubectl_create_token_gives_the_service_account_identity_and_its_rbac(
        cluster: Cluster, tmp_path: Path) -> None:
    cluster.kubectl("create", "namespace", "sa-team")
    cluster.kubectl("create", "serviceaccount", "builder", "-n", "sa-team")
    token = cluster.kubectl("create", "token", "builder", "-n", "sa-team",
                            "--duration", "20m").stdout.strip()
    claims = _claims(token)
    assert claims["sub"] == "system:serviceaccount:sa-team:builder"
    assert claims["iss"] == ISSUER and claims["aud"] == [API_AUDIENCE]
    assert claims[CLUSTER_CLAIM] == "root"
    assert 1190 <= claims["exp"] - claims["iat"] <= 1210
    kc = _token_kubeconfig(cluster, token, tmp_path / "sa.kubeconfig")

    refused = cluster.kubectl("get", "pods", "-n", "sa-team", kubeconfig=kc, check=False)
    assert refused.returncode != 0
    assert 'User "system:serviceaccount:sa-team:builder" cannot list resource "pods"' \
        in refused.stderr
    cluster.kubectl("create", "role", "pod-reader", "-n", "sa-team", "--verb=get,list",
                    "--resource=pods")
    cluster.kubectl("create", "rolebinding", "builder-reads", "-n", "sa-team",
                    "--role=pod-reader", "--serviceaccount=sa-team:builder")
    assert cluster.kubectl("get", "pods", "-n", "sa-team", kubeconfig=kc).returncode == 0
    # Not beyond its namespace's grant.
    other = cluster.kubectl("get", "pods", "-n", "default", kubeconfig=kc, check=False)
    assert other.returncode != 0 and "Forbidden" in other.stderr

    # Groups: system:serviceaccounts:<ns> grants work for every account of the namespace.
    cluster.kubectl("create", "role", "cm-reader", "-n", "sa-team", "--verb=list",
                    "--resource=configmaps")
    cluster.kubectl("create", "rolebinding", "all-sa-read-cm", "-n", "sa-team",
                    "--role=cm-reader", "--group=system:serviceaccounts:sa-team")
    assert cluster.kubectl("get", "configmaps", "-n", "sa-team", kubeconfig=kc).returncode == 0

    # Deleting the ServiceAccount revokes its tokens, and a new one by the same name does
    # not inherit them.
    cluster.kubectl("delete", "serviceaccount", "builder", "-n", "sa-team")
    gone = cluster.kubectl("get", "pods", "-n", "sa-team", kubeconfig=kc, check=False)
    assert gone.returncode != 0 and "Unauthorized" in gone.stderr
    cluster.kubectl("create", "serviceaccount", "builder", "-n", "sa-team")
    again = cluster.kubectl("get", "pods", "-n", "sa-team", kubeconfig=kc, check=False)
    assert again.returncode != 0 and "Unauthorized" in again.stderr


def test_token_request_validation_and_missing_account(http: httpx.Client) -> None:
    path = "/api/v1/namespaces/default/serviceaccounts/{}/token"
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": 60}}
    short = http.post(path.format("default"), json=body)
    assert short.status_code == 422
    assert short.json()["details"]["causes"][0]["field"] == "spec.expirationSeconds"
    assert http.post(path.format("nobody-here"), json={"spec": {}}).status_code == 404
    bad_kind = http.post(path.format("default"),
                         json={"spec": {"boundObjectRef": {"kind": "Node", "name": "x"}}})
    assert bad_kind.status_code == 422
    assert bad_kind.json()["details"]["causes"][0]["field"] == "spec.boundObjectRef.kind"


def test_a_token_bound_to_a_pod_dies_with_the_pod(cluster: Cluster, http: httpx.Client) -> None:
    cluster.kubectl("run", "holder", "-n", "default", "--image=busybox", "--restart=Never")
    r = http.post("/api/v1/namespaces/default/serviceaccounts/default/token",
                  json={"spec": {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1",
                                                    "name": "holder"}}})
    assert r.status_code == 201, r.text
    token = r.json()["status"]["token"]
    pod_uid = cluster.server.store.get("root", "pods", "default", "holder")["metadata"]["uid"]
    assert _claims(token)["kubernetes.io"]["pod"] == {"name": "holder", "uid": pod_uid}
    status = _review(http, token)
    assert status["authenticated"] is True
    assert status["user"]["username"] == "system:serviceaccount:default:default"
    assert set(status["user"]["groups"]) == {"system:serviceaccounts",
                                             "system:serviceaccounts:default",
                                             "system:authenticated"}
    assert status["user"]["extra"]["authentication.kubernetes.io/pod-name"] == ["holder"]
    with http_client(cluster.server, token) as as_pod:
        assert as_pod.get("/api/v1/namespaces/default/pods").status_code == 403  # no grant
    cluster.kubectl("delete", "pod", "holder", "-n", "default", "--wait=false")
    with http_client(cluster.server, token) as as_pod:
        assert as_pod.get("/api/v1/namespaces/default/pods").status_code == 401
    assert _review(http, token)["authenticated"] is False


def test_token_review_audiences_expiry_and_garbage(cluster: Cluster, http: httpx.Client) -> None:
    r = http.post("/api/v1/namespaces/default/serviceaccounts/default/token",
                  json={"spec": {"audiences": ["vault"]}})
    token = r.json()["status"]["token"]
    assert _review(http, token, ["vault"])["authenticated"] is True
    assert _review(http, token)["authenticated"] is False  # not meant for the API
    with http_client(cluster.server, token) as c:
        assert c.get("/api/v1/namespaces").status_code == 401
    assert _review(http, "not-a-token")["authenticated"] is False
    assert _review(http, token[:-4] + "AAAA", ["vault"])["authenticated"] is False
    # Static tokens are reviewed too.
    admin = _review(http, cluster.server.admin_token)
    assert admin["authenticated"] is True and admin["user"]["username"] == "admin"
    # An expired token (signed by the server's own key) is refused.
    sa = cluster.server.store.get("root", "serviceaccounts", "default", "default")
    now = int(time.time())
    expired = cluster.server.app.sa_tokens.signer.sign({
        "iss": ISSUER, "sub": "system:serviceaccount:default:default", "aud": [API_AUDIENCE],
        "iat": now - 4000, "nbf": now - 4000, "exp": now - 400, CLUSTER_CLAIM: "root",
        "kubernetes.io": {"namespace": "default",
                          "serviceaccount": {"name": "default", "uid": sa["metadata"]["uid"]}}})
    assert _review(http, expired)["authenticated"] is False
    with http_client(cluster.server, expired) as c:
        assert c.get("/api/v1/namespaces/default/pods").status_code == 401
    # A caller without `create tokenreviews` may not review.
    sa_token = http.post("/api/v1/namespaces/default/serviceaccounts/default/token",
                         json={"spec": {}}).json()["status"]["token"]
    with http_client(cluster.server, sa_token) as c:
        assert c.post("/apis/authentication.k8s.io/v1/tokenreviews",
                      json={"spec": {"token": sa_token}}).status_code == 403


def test_a_token_works_only_in_the_logical_cluster_that_issued_it(
        cluster: Cluster, tmp_path: Path) -> None:
    with http_client(cluster.server, cluster="sa-other") as other:
        assert other.get("/api/v1/namespaces").status_code == 200  # admin brings it to life
        r = other.post("/api/v1/namespaces/default/serviceaccounts/default/token",
                       json={"spec": {}})
        assert r.status_code == 201, r.text
        other_token = r.json()["status"]["token"]
        other.post("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", json={
            "metadata": {"name": "sa-view"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "sa-ns-reader"},
            "subjects": [{"kind": "Group", "name": "system:serviceaccounts"}]})
        other.post("/apis/rbac.authorization.k8s.io/v1/clusterroles", json={
            "metadata": {"name": "sa-ns-reader"},
            "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list"]}]})
    cluster.kubectl("create", "namespace", "only-in-root")
    home = _token_kubeconfig(cluster, other_token, tmp_path / "home", "sa-other")
    listed = cluster.kubectl("get", "namespaces", "-o", "name", kubeconfig=home).stdout
    assert "namespace/default" in listed and "only-in-root" not in listed
    # The same token at the root URL (where an account default/default exists too) is
    # served in its own cluster, never the host's: root's namespace is not there.
    root = _token_kubeconfig(cluster, other_token, tmp_path / "root", "root")
    at_root = cluster.kubectl("get", "namespaces", "-o", "name", kubeconfig=root)
    assert "namespace/default" in at_root.stdout and "only-in-root" not in at_root.stdout
    with http_client(cluster.server, other_token) as c:
        names = {n["metadata"]["name"] for n in c.get("/api/v1/namespaces").json()["items"]}
        assert "default" in names and "only-in-root" not in names
    # Under a third cluster's prefix, the token holds nothing.
    with http_client(cluster.server, cluster="sa-third") as third:
        assert third.get("/api/v1/namespaces").status_code == 200
    third_url = _token_kubeconfig(cluster, other_token, tmp_path / "third", "sa-third")
    refused = cluster.kubectl("get", "namespaces", kubeconfig=third_url, check=False)
    assert refused.returncode != 0 and "must be logged in" in refused.stderr  # a 401
    with http_client(cluster.server, other_token, cluster="sa-third") as c:
        assert c.get("/api/v1/namespaces").status_code == 401


def test_kube_root_ca_is_published_in_every_namespace(cluster: Cluster) -> None:
    ca = cluster.server.ca_path.read_text()  # type: ignore[union-attr]
    cluster.kubectl("create", "namespace", "ca-check")
    for ns in ("default", "kube-system", "ca-check"):
        cm = json.loads(cluster.kubectl("get", "configmap", "kube-root-ca.crt", "-n", ns,
                                        "-o", "json").stdout)
        assert cm["data"]["ca.crt"] == ca
    cluster.kubectl("delete", "configmap", "kube-root-ca.crt", "-n", "ca-check")
    cm = json.loads(cluster.kubectl("get", "configmap", "kube-root-ca.crt", "-n", "ca-check",
                                    "-o", "json").stdout)
    assert cm["data"]["ca.crt"] == ca  # put back, like Kubernetes' publisher
    cluster.kubectl("patch", "configmap", "kube-root-ca.crt", "-n", "ca-check", "--type=merge",
                    "-p", '{"data": {"ca.crt": "forged"}}')
    cm = json.loads(cluster.kubectl("get", "configmap", "kube-root-ca.crt", "-n", "ca-check",
                                    "-o", "json").stdout)
    assert cm["data"]["ca.crt"] == ca


def _pod(name: str, automount: bool | None = None, sa: str | None = None) -> dict:
    spec: dict = {"containers": [{"name": "main", "image": "busybox"}]}
    if automount is not None:
        spec["automountServiceAccountToken"] = automount
    if sa is not None:
        spec["serviceAccountName"] = sa
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _mounts(pod: dict) -> list[str]:
    return [m["mountPath"] for m in pod["spec"]["containers"][0].get("volumeMounts") or ()]


def test_pods_get_the_projected_token_volume_unless_opted_out(http: httpx.Client) -> None:
    path = "/api/v1/namespaces/default/pods"
    plain = http.post(path, json=_pod("mounts-token"))
    assert plain.status_code == 201, plain.text
    spec = plain.json()["spec"]
    assert _mounts(plain.json()) == [TOKEN_MOUNT_PATH]
    volume = next(v for v in spec["volumes"] if v["name"].startswith("kube-api-access-"))
    sources = volume["projected"]["sources"]
    assert sources[0]["serviceAccountToken"]["path"] == "token"
    assert sources[1]["configMap"]["name"] == "kube-root-ca.crt"
    assert sources[2]["downwardAPI"]["items"][0]["path"] == "namespace"

    opted_out = http.post(path, json=_pod("no-token", automount=False)).json()
    assert _mounts(opted_out) == [] and not opted_out["spec"].get("volumes")

    http.post("/api/v1/namespaces/default/serviceaccounts",
              json={"metadata": {"name": "quiet"}, "automountServiceAccountToken": False})
    quiet = http.post(path, json=_pod("quiet-sa", sa="quiet")).json()
    assert _mounts(quiet) == []
    loud = http.post(path, json=_pod("pod-says-yes", sa="quiet", automount=True)).json()
    assert _mounts(loud) == [TOKEN_MOUNT_PATH]

    missing = http.post(path, json=_pod("ghost-sa", sa="ghost"))
    assert missing.status_code == 403
    assert 'serviceaccount "ghost" not found' in missing.json()["message"]
