"""The syncer's rules and the VirtualCluster's validation, as pure functions."""

from __future__ import annotations

import copy

from hypothesis import given
from hypothesis import strategies as st

from gpushare.api import shapes
from gpushare.controllers.scheduling.grouping import PodGroupPlan
from gpushare.tenancy import names, translate, views
from gpushare.tenancy.policy import TenantPolicy, validate_virtual_cluster

_label = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?", fullmatch=True)


@given(_label, _label, _label, _label)
def test_host_names_are_valid_and_collision_free(n1, ns1, n2, ns2):
    a, b = names.host_name(n1, ns1), names.host_name(n2, ns2)
    assert len(a) <= 63 and a[0].isalnum() and a[-1].isalnum()
    if (n1, ns1) != (n2, ns2):
        assert a != b


def test_concatenation_tricks_do_not_collide():
    assert names.host_name("a", "b-c") != names.host_name("a-b", "c")
    long = "x" * 200
    assert len(names.host_name(long, "default", 253)) <= 253


def test_virtual_cluster_validation_names_each_bad_field():
    ok = {"metadata": {"name": "nlp"}, "spec": {"queues": ["nlp"]}}
    assert validate_virtual_cluster(ok) == []
    bad = {"metadata": {"name": "root"},
           "spec": {"queues": [], "maxPods": -1, "paused": "yes", "priorityClasses": "train"}}
    fields = {c.field for c in validate_virtual_cluster(bad)}
    assert fields == {"metadata.name", "spec.queues", "spec.maxPods", "spec.paused",
                      "spec.priorityClasses"}
    assert {c.field for c in validate_virtual_cluster(
        {"metadata": {"name": "Bad_Name"}, "spec": {"queues": ["q", "q"]}})} == {
        "metadata.name", "spec.queues"}
    assert validate_virtual_cluster({"metadata": {"name": "x" * 61},
                                     "spec": {"queues": ["q"]}})[0].field == "metadata.name"


def test_policy_reads_odd_stored_values_without_failing():
    policy = TenantPolicy.from_object({"metadata": {"name": "t"},
                                       "spec": {"queues": "nope", "maxPods": True}})
    assert policy.queues == ("default-queue",) and policy.max_pods is None


TENANT_POD = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "train", "namespace": "research", "uid": "u-1",
                 "labels": {"kai.scheduler/queue": "nlp", "tenancy.gpushare.io/tenant": "other",
                            "priorityClassName": "inference", "app": "x"},
                 "annotations": {"gpu-fraction": "0.5", "gpushare.io/gpu-indices": "0,1",
                                 "pod-group-name": "theirs"},
                 "ownerReferences": [{"kind": "Job", "name": "j", "uid": "j-1",
                                      "controller": True}]},
    "spec": {
        "nodeName": "box", "hostNetwork": True, "serviceAccountName": "root-sa",
        "runtimeClassName": "x", "schedulerName": "default-scheduler",
        "volumes": [{"name": "h", "hostPath": {"path": "/"}},
                    {"name": "c", "configMap": {"name": "cfg"}},
                    {"name": "s", "secret": {"secretName": "tok"}}],
        "containers": [{"name": "c", "image": "python", "command": ["python3"],
                        "securityContext": {"privileged": True},
                        "env": [{"name": "A", "valueFrom": {"configMapKeyRef": {
                            "name": "cfg", "key": "a"}}},
                                {"name": "ME", "valueFrom": {"fieldRef": {
                                    "fieldPath": "metadata.name"}}}],
                        "envFrom": [{"secretRef": {"name": "env-secret"}}]}],
    },
}


def test_a_host_pod_carries_only_what_runs_the_workload():
    host = translate.host_pod("nlp", TENANT_POD, "nlp", "pg-x")
    meta, spec = host["metadata"], host["spec"]
    assert meta["namespace"] == "vc-nlp"
    assert meta["labels"]["tenancy.gpushare.io/tenant"] == "nlp"
    assert meta["labels"]["kai.scheduler/queue"] == "nlp"
    assert "priorityClassName" not in meta["labels"]
    assert meta["annotations"]["pod-group-name"] == "pg-x"
    assert "gpushare.io/gpu-indices" not in meta["annotations"]
    assert meta["annotations"]["tenancy.gpushare.io/object"] == "research/train"
    assert meta["annotations"]["tenancy.gpushare.io/owner"] == "Job/j/j-1"
    assert "ownerReferences" not in meta
    for key in ("nodeName", "hostNetwork", "serviceAccountName", "runtimeClassName"):
        assert key not in spec
    assert spec["schedulerName"] == "gpushare" and spec["automountServiceAccountToken"] is False
    assert [v["name"] for v in spec["volumes"]] == ["c", "s"]
    container = spec["containers"][0]
    assert "securityContext" not in container
    assert container["env"][0]["valueFrom"]["configMapKeyRef"]["name"] == names.host_name(
        "cfg", "research", 253)
    assert container["env"][1] == {"name": "ME", "value": "train"}
    assert container["envFrom"][0]["secretRef"]["name"] == names.host_name(
        "env-secret", "research", 253)
    refs = translate.references(TENANT_POD)
    assert refs.config_maps == {"cfg"} and refs.secrets == {"tok", "env-secret"}


def test_mounts_of_volumes_a_host_pod_does_not_get_go_with_them():
    """The tenant's API server gives a pod its ServiceAccount token as a projected volume
    mounted in each container; the host pod gets no token, and kube-apiserver refuses a
    mount that names no volume (422), so the host pod never reached a real cluster."""
    pod = copy.deepcopy(TENANT_POD)
    spec = pod["spec"]
    spec["volumes"].append({"name": "kube-api-access-7x", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}]}})
    spec["containers"][0]["volumeMounts"] = [
        {"name": "kube-api-access-7x", "mountPath": "/var/run/secrets/kubernetes.io/"
         "serviceaccount", "readOnly": True},
        {"name": "c", "mountPath": "/etc/cfg"}, {"name": "h", "mountPath": "/host"}]
    spec["initContainers"] = [{"name": "i", "image": "python", "volumeMounts": [
        {"name": "kube-api-access-7x", "mountPath": "/var/run/secrets/kubernetes.io/"
         "serviceaccount"}]}]
    host = translate.host_pod("nlp", pod, "nlp", "pg-x")["spec"]
    assert host["containers"][0]["volumeMounts"] == [{"name": "c", "mountPath": "/etc/cfg"}]
    assert "volumeMounts" not in host["initContainers"][0]
    assert shapes.volume_mount_causes(host, "spec") == []


def test_a_tenant_podgroup_keeps_its_gang_but_takes_the_platforms_queue():
    plan = PodGroupPlan("pg-j-1", "research", {"kind": "Job", "name": "j", "uid": "1"}, 4,
                        "nlp", "train", None, "Job")
    tenant_pg = {"metadata": {"name": "gang"}, "spec": {
        "minMember": 4, "queue": "vision", "subGroups": [{"name": "a", "minMember": 2}]}}
    pg = translate.host_podgroup("nlp", plan, "nlp", tenant_pg)
    assert pg["spec"]["minMember"] == 4 and pg["spec"]["queue"] == "nlp"
    assert pg["spec"]["subGroups"] == [{"name": "a", "minMember": 2}]
    assert pg["metadata"]["namespace"] == "vc-nlp" and "ownerReferences" not in pg["metadata"]


def _node(name: str, gpus: str) -> dict:
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "L40S"}},
            "status": {"allocatable": {"nvidia.com/gpu": gpus, "cpu": "8"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def test_the_node_view_shows_the_tenants_share():
    queue = {"metadata": {"name": "nlp"}, "spec": {"resources": {"gpu": {"quota": 0.33}}},
             "status": {"fairShare": {"nvidia.com/gpu": "500m"},
                        "allocated": {"nvidia.com/gpu": "330m"}}}
    out = views.tenant_nodes([_node("box", "1"), _node("busy", "1")],
                             {"box": 660, "busy": 0}, {"box": 330}, [queue])
    # Holds 330m on box, may take 170m more (fair share 500m): 340m are free there.
    assert out["box"]["status"]["allocatable"]["nvidia.com/gpu"] == "500m"
    assert out["box"]["metadata"]["annotations"]["tenancy.gpushare.io/gpu-allocated"] == "330m"
    assert out["busy"]["status"]["allocatable"]["nvidia.com/gpu"] == "170m"
    assert out["box"]["status"]["addresses"] == [{"type": "Hostname", "address": "box"}]


def test_host_usage_follows_watch_events():
    usage = views.HostUsage()
    pod = {"metadata": {"name": "p", "namespace": "vc-nlp",
                        "annotations": {"gpushare.io/gpu-indices": "0",
                                        "gpushare.io/gpu-portion": "0.33"}},
           "spec": {"nodeName": "box"}, "status": {"phase": "Running"}}
    assert usage.update("ADDED", pod)
    assert usage.nodes() == {"box": 330} and usage.namespace("vc-nlp") == {"box": 330}
    assert not usage.update("MODIFIED", pod)
    assert usage.update("DELETED", pod)
    assert usage.nodes() == {"box": 0} and usage.namespace("vc-nlp") == {}
