"""Attack: a tenant admin rewrites a pod after creation. Everything checked when the pod was
created (no `spec.nodeName`, no host paths, the binder's choice) would be bypassed if the
spec could change later: as Kubernetes, a pod update may change only the images, the
active deadline, added tolerations, the grace period of a deleting pod and removed
scheduling gates; anything else answers 422."""

from __future__ import annotations

import json

import pytest
from tenancy_support import QUEUES, Kubectl, Platform, pod_manifest

from waiting import wait_for

FORBIDDEN = "spec: Forbidden: pod updates may not change fields other than"


@pytest.fixture(scope="module")
def tenant(platform: Platform) -> Kubectl:
    platform.host.apply(QUEUES % {"gpus": 1, "quota": 0.33})
    kubectl = platform.tenant("immut", "--queue", "nlp")
    kubectl.apply(pod_manifest("steady", fraction="0.1"))
    # Pending for good: asks for more GPUs than the node has.
    kubectl.apply(pod_manifest("waiting", fraction="0.1").replace(
        "annotations: {gpu-fraction: \"0.1\"}", "annotations: {}").replace(
        "    command:", "    resources: {limits: {nvidia.com/gpu: 8}}\n    command:"))
    wait_for(lambda: kubectl.json("get", "pod", "steady")["spec"].get("nodeName"), 90,
             "the tenant's pod bound")
    return kubectl


def _refused(kubectl: Kubectl, *args: str) -> str:
    done = kubectl.run(*args, check=False)
    assert done.returncode != 0, f"kubectl {' '.join(args)} was accepted"
    return done.stderr


@pytest.mark.parametrize("patch", [
    {"spec": {"nodeName": "elsewhere"}},
    {"spec": {"volumes": [{"name": "x", "emptyDir": {}}]}},
    {"spec": {"serviceAccountName": "builder"}},
    {"spec": {"containers": [{"name": "train", "command": ["sh", "-c", "id"]}]}},
])
def test_a_tenant_cannot_change_a_pods_spec(tenant: Kubectl, patch: dict) -> None:
    for pod in ("steady", "waiting"):
        before = tenant.json("get", "pod", pod)["spec"]
        stderr = _refused(tenant, "patch", "pod", pod, "--type=strategic",
                          "-p", json.dumps(patch))
        assert f'Pod "{pod}" is invalid: {FORBIDDEN}' in stderr, stderr
        assert tenant.json("get", "pod", pod)["spec"] == before


def test_a_full_replace_changing_volumes_is_refused(tenant: Kubectl) -> None:
    pod = tenant.json("get", "pod", "steady")
    pod["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    stderr = _replace(tenant, pod)
    assert FORBIDDEN in stderr, stderr


def _replace(kubectl: Kubectl, pod: dict) -> str:
    done = kubectl.run("replace", "-f", "-", stdin=json.dumps(pod), check=False)
    assert done.returncode != 0, "the replace was accepted"
    return done.stderr


def test_the_mutable_fields_still_change(tenant: Kubectl) -> None:
    tenant.run("patch", "pod", "waiting", "--type=strategic", "-p", json.dumps({"spec": {
        "containers": [{"name": "train", "image": "python:3.12"}],
        "activeDeadlineSeconds": 3600,
        "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}]}}))
    pod = tenant.json("get", "pod", "waiting")
    assert pod["spec"]["containers"][0]["image"] == "python:3.12"
    assert pod["spec"]["activeDeadlineSeconds"] == 3600
    stderr = _refused(tenant, "patch", "pod", "waiting", "--type=json", "-p", json.dumps(
        [{"op": "remove", "path": "/spec/activeDeadlineSeconds"}]))
    assert FORBIDDEN in stderr
