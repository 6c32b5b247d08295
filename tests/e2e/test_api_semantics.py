"""What the controllers rely on: watch streams changes, 409 on a stale write, 422 on a bad
Queue; and a pending pod's reason reaches its Events."""

from __future__ import annotations

import threading

from e2e_support import add_node, wait_for
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch
from kubernetes.client.rest import ApiException


def _core(server):
    api_client = k8s_config.new_client_from_config(config_file=str(server.kubeconfig))
    return api_client, k8s.CoreV1Api(api_client)


def _pod(name):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def test_watch_streams_changes_in_order(server):
    api_client, core = _core(server)
    listing = core.list_namespaced_pod("default")
    seen: list[tuple[str, str]] = []
    done = threading.Event()

    def watch():
        w = k8s_watch.Watch()
        for event in w.stream(core.list_namespaced_pod, "default",
                              resource_version=listing.metadata.resource_version,
                              timeout_seconds=20):
            seen.append((event["type"], event["object"].metadata.name))
            if len(seen) == 3:
                w.stop()
        done.set()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    core.create_namespaced_pod("default", _pod("w1"))
    core.patch_namespaced_pod("w1", "default", {"metadata": {"labels": {"a": "b"}}})
    core.delete_namespaced_pod("w1", "default")
    assert done.wait(25)
    assert seen == [("ADDED", "w1"), ("MODIFIED", "w1"), ("DELETED", "w1")]
    api_client.close()


def test_conflicting_update_gets_409(server):
    api_client, core = _core(server)
    created = core.create_namespaced_pod("default", _pod("c1"))
    stale = created.metadata.resource_version
    core.patch_namespaced_pod("c1", "default", {"metadata": {"labels": {"x": "1"}}})
    body = core.read_namespaced_pod("c1", "default")
    body.metadata.resource_version = stale
    body.metadata.labels = {"x": "2"}
    try:
        core.replace_namespaced_pod("c1", "default", body)
        raise AssertionError("a stale replace was accepted")
    except ApiException as error:
        assert error.status == 409
    api_client.close()


def test_invalid_queue_gets_422_naming_the_field(kubectl):
    bad = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: broken}
spec:
  resources:
    gpu: {quota: "lots", limit: 1, overQuotaWeight: 1}
"""
    done = kubectl.run("apply", "-f", "-", stdin=bad, check=False)
    assert done.returncode != 0
    assert "spec.resources.gpu.quota" in done.stderr
    assert "Invalid" in done.stderr or "422" in done.stderr


def test_pending_reason_names_the_queue_and_its_limit(server, controllers, kubectl):
    add_node(server.kubeconfig, "box", "4xH100")
    kubectl.run("apply", "-f", "-", stdin="""
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: small}
spec:
  resources:
    gpu: {quota: 1, limit: 1, overQuotaWeight: 1}
    cpu: {quota: -1, limit: -1, overQuotaWeight: 1}
    memory: {quota: -1, limit: -1, overQuotaWeight: 1}
---
apiVersion: v1
kind: Pod
metadata:
  name: greedy
  namespace: default
  labels: {kai.scheduler/queue: small}
spec:
  schedulerName: gpushare
  containers:
  - name: main
    image: busybox
    resources: {limits: {nvidia.com/gpu: "2"}}
""")

    def reason():
        events = kubectl.json("get", "events", "-n", "default")["items"]
        return [e["message"] for e in events
                if e.get("reason") == "Unschedulable" and e["involvedObject"]["name"] == "greedy"]

    messages = wait_for(reason, what="an Unschedulable event")
    assert "small" in messages[0]
    described = kubectl.run("describe", "pod", "greedy", "-n", "default").stdout
    assert "Unschedulable" in described and "small" in described
    pod = kubectl.json("get", "pod", "greedy", "-n", "default")
    assert not pod["spec"].get("nodeName")


def test_a_missing_queue_is_explained_in_events_and_conditions(server, controllers, kubectl):
    add_node(server.kubeconfig, "box", "1xL4")
    kubectl.run("apply", "-f", "-", stdin="""
apiVersion: v1
kind: Pod
metadata:
  name: lost
  namespace: default
  labels: {kai.scheduler/queue: nowhere}
spec:
  schedulerName: gpushare
  containers: [{name: main, image: busybox}]
""")

    def messages(name):
        events = kubectl.json("get", "events", "-n", "default")["items"]
        return [e["message"] for e in events
                if e.get("reason") == "Unschedulable" and e["involvedObject"]["name"] == name]

    lost = wait_for(lambda: messages("lost"), what="an event for the pod without a queue")
    assert "nowhere" in lost[0] and "does not exist" in lost[0]
    group = next(g for g in kubectl.json("get", "podgroups", "-n", "default")["items"]
                 if g["spec"]["queue"] == "nowhere")
    conditions = wait_for(
        lambda: kubectl.json("get", "podgroup", group["metadata"]["name"], "-n", "default")
        .get("status", {}).get("schedulingConditions"), what="the PodGroup's condition")
    assert "nowhere" in conditions[0]["reasons"][0]["message"]
