"""Users stay inside the privileges they hold: RBAC escalate/bind checks and binding
(spec.nodeName, GPU slot annotations) reserved to the scheduler's identity."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest
from apiserver_harness import Cluster

ALICE_RBAC = """
apiVersion: v1
kind: Namespace
metadata: {name: team-a}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: rbac-manager, namespace: team-a}
rules:
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, create, update, patch, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: alice-manages-rbac, namespace: team-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: rbac-manager}
subjects: [{kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: secret-reader}
rules:
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, list]
"""


@pytest.fixture(scope="module")
def alice(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    cluster.kubectl("apply", "-f", "-", stdin=ALICE_RBAC)
    token = secrets.token_urlsafe(24)
    cluster.server.tokens.add(token, "alice", [])
    path = tmp_path_factory.mktemp("alice") / "alice.kubeconfig"
    cluster.server.write_kubeconfig(path, token=token, user="alice")
    return path


def _refused(cluster: Cluster, kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    done = cluster.kubectl(*args, kubeconfig=kubeconfig, check=False, stdin=stdin)
    assert done.returncode != 0, f"kubectl {' '.join(args)} was allowed:\n{done.stdout}"
    assert "Forbidden" in done.stderr or "forbidden" in done.stderr, done.stderr
    return done.stderr


def test_a_role_granting_what_the_user_lacks_is_refused(cluster: Cluster, alice: Path) -> None:
    everything = _refused(cluster, alice, "create", "role", "all", "-n", "team-a",
                          "--verb=*", "--resource=*.*")
    assert "attempting to grant RBAC permissions not currently held" in everything
    assert 'Resources:["*"]' in everything
    secrets_role = _refused(cluster, alice, "create", "role", "peek", "-n", "team-a",
                            "--verb=get", "--resource=secrets")
    assert 'Resources:["secrets"]' in secrets_role and 'Verbs:["get"]' in secrets_role
    # What she holds she may hand on.
    cluster.kubectl("create", "role", "pod-viewer", "-n", "team-a", "--verb=get,list",
                    "--resource=pods", kubeconfig=alice)
    # Nor may she widen a role she made to what she lacks.
    stderr = _refused(cluster, alice, "patch", "role", "pod-viewer", "-n", "team-a",
                      "--type=json", "-p", '[{"op": "add", "path": "/rules/-", "value": '
                      '{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}}]')
    assert 'Resources:["secrets"]' in stderr


def test_binding_a_role_the_user_does_not_hold_is_refused(cluster: Cluster,
                                                          alice: Path) -> None:
    stderr = _refused(cluster, alice, "create", "rolebinding", "me-secrets", "-n", "team-a",
                      "--clusterrole=secret-reader", "--user=alice")
    assert 'Resources:["secrets"]' in stderr and "secret-reader" in stderr
    everyone = _refused(cluster, alice, "create", "rolebinding", "all-secrets", "-n",
                        "team-a", "--clusterrole=secret-reader",
                        "--group=system:authenticated")
    assert 'Resources:["secrets"]' in everyone
    assert _refused(cluster, alice, "create", "rolebinding", "ghost", "-n", "team-a",
                    "--role=no-such-role", "--user=alice")
    # A role she holds may be bound, to anyone (as in Kubernetes).
    cluster.kubectl("create", "rolebinding", "all-view-pods", "-n", "team-a",
                    "--role=pod-viewer", "--group=system:authenticated", kubeconfig=alice)
    listed = cluster.kubectl("get", "secrets", "-n", "team-a", kubeconfig=alice, check=False)
    assert listed.returncode != 0


def test_escalate_and_bind_verbs_allow_what_they_name(cluster: Cluster, alice: Path) -> None:
    cluster.kubectl("apply", "-f", "-", stdin="""
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: may-escalate-and-bind, namespace: team-a}
rules:
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles]
  verbs: [escalate]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [clusterroles]
  resourceNames: [secret-reader]
  verbs: [bind]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: alice-escalates, namespace: team-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: may-escalate-and-bind}
subjects: [{kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}]
""")
    cluster.kubectl("create", "role", "peek", "-n", "team-a", "--verb=get",
                    "--resource=secrets", kubeconfig=alice)
    cluster.kubectl("create", "rolebinding", "me-secrets", "-n", "team-a",
                    "--clusterrole=secret-reader", "--user=alice", kubeconfig=alice)
    assert cluster.kubectl("get", "secrets", "-n", "team-a", kubeconfig=alice).returncode == 0


def _pod(name: str, node: str | None = None, annotations: dict | None = None) -> str:
    pod: dict = {"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": name, "namespace": "team-a"},
                 "spec": {"containers": [{"name": "main", "image": "busybox"}]}}
    if node:
        pod["spec"]["nodeName"] = node
    if annotations:
        pod["metadata"]["annotations"] = annotations
    return json.dumps(pod)


def test_only_the_scheduler_binds_pods(cluster: Cluster, alice: Path) -> None:
    stderr = _refused(cluster, alice, "create", "-f", "-", stdin=_pod("prebound", node="box"))
    assert "spec.nodeName" in stderr and "scheduler" in stderr
    slots = _refused(cluster, alice, "create", "-f", "-", stdin=_pod(
        "preslotted", annotations={"gpushare.io/gpu-indices": "0",
                                   "gpushare.io/gpu-portion": "0.5"}))
    assert "gpushare.io/gpu-indices" in slots
    cluster.kubectl("create", "-f", "-", stdin=_pod("mine"), kubeconfig=alice)
    assert _refused(cluster, alice, "annotate", "pod", "mine", "-n", "team-a",
                    "gpushare.io/gpu-portion=1")
    assert "spec.nodeName" in _refused(cluster, alice, "patch", "pod", "mine", "-n", "team-a",
                                       "-p", '{"spec": {"nodeName": "box"}}')
    # Other annotations are hers to edit.
    cluster.kubectl("annotate", "pod", "mine", "-n", "team-a", "note=hello", kubeconfig=alice)
    # The scheduler's way (pods/binding) sets both in one write; an admin may still pre-bind.
    cluster.kubectl("create", "-f", "-", stdin=_pod("admin-bound", node="box"))
    pod = json.loads(cluster.kubectl("get", "pod", "mine", "-n", "team-a", "-o",
                                     "json").stdout)
    assert not pod["spec"].get("nodeName")
    assert "gpushare.io/gpu-portion" not in pod["metadata"].get("annotations", {})


def test_no_other_write_path_lets_a_user_bind(cluster: Cluster, alice: Path) -> None:
    """Server-side apply, a JSON patch, a replace and a Binding of her own are refused."""
    cluster.kubectl("create", "-f", "-", stdin=_pod("paths"), kubeconfig=alice)
    applied = _refused(cluster, alice, "apply", "--server-side", "--force-conflicts", "-f",
                       "-", stdin=_pod("paths", annotations={
                           "gpushare.io/gpu-indices": "0", "gpushare.io/gpu-portion": "1"}))
    assert "gpushare.io/gpu-indices" in applied
    assert "spec.nodeName" in _refused(
        cluster, alice, "patch", "pod", "paths", "-n", "team-a", "--type=json", "-p",
        '[{"op": "add", "path": "/spec/nodeName", "value": "box"}]')
    current = json.loads(cluster.kubectl("get", "pod", "paths", "-n", "team-a", "-o",
                                         "json", kubeconfig=alice).stdout)
    current["metadata"].setdefault("annotations", {})["gpushare.io/gpu-memory-mib"] = "100"
    replaced = _refused(cluster, alice, "replace", "-f", "-", stdin=json.dumps(current))
    assert "gpushare.io/gpu-memory-mib" in replaced
    binding = json.dumps({"apiVersion": "v1", "kind": "Binding",
                          "metadata": {"name": "paths", "namespace": "team-a"},
                          "target": {"apiVersion": "v1", "kind": "Node", "name": "box"}})
    assert "pods/binding" in _refused(cluster, alice, "create", "--raw",
                                      "/api/v1/namespaces/team-a/pods/paths/binding",
                                      "-f", "-", stdin=binding)
    pod = json.loads(cluster.kubectl("get", "pod", "paths", "-n", "team-a", "-o",
                                     "json").stdout)
    assert not pod["spec"].get("nodeName")
    assert not {"gpushare.io/gpu-indices", "gpushare.io/gpu-memory-mib"} & set(
        pod["metadata"].get("annotations") or {})
