"""The real kubectl (v1.32) against the server."""

from __future__ import annotations

import json
import re
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
import yaml
from apiserver_harness import KUBECTL, Cluster, http_client
from kubernetes import client

from node_pki import node_tls

QUEUES = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: ml-org}
spec:
  priority: 100
  resources:
    gpu: {quota: 1, limit: 1, overQuotaWeight: 1}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: nlp}
spec:
  parentQueue: ml-org
  resources:
    gpu: {quota: 0.33, limit: 1, overQuotaWeight: 1}
"""

POD = """
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
spec:
  containers:
  - name: main
    image: busybox
    command: ["sleep", "100"]
    env:
    - {name: A, value: "1"}
    - {name: B, value: "2"}
  - name: side
    image: busybox
"""


def headers(out: str) -> list[str]:
    return re.split(r"\s{2,}", out.splitlines()[0].strip())


def test_api_resources_lists_builtins_and_crds(cluster: Cluster) -> None:
    out = cluster.kubectl("api-resources").stdout
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    for name in ("pods", "nodes", "namespaces", "events", "priorityclasses", "leases", "jobs",
                 "deployments", "roles", "customresourcedefinitions", "queues", "podgroups"):
        assert name in rows, name
    assert " q " in rows["queues"] and "scheduling.run.ai/v2" in rows["queues"]
    assert " pg " in rows["podgroups"] and "scheduling.run.ai/v2alpha2" in rows["podgroups"]


def test_apply_is_idempotent_and_queue_columns_show_status(cluster: Cluster) -> None:
    first = cluster.kubectl("apply", "-f", "-", stdin=QUEUES).stdout
    assert "queue.scheduling.run.ai/ml-org created" in first
    second = cluster.kubectl("apply", "-f", "-", stdin=QUEUES).stdout
    assert "queue.scheduling.run.ai/nlp unchanged" in second
    status = {"status": {"allocated": {"nvidia.com/gpu": "330m"},
                         "fairShare": {"nvidia.com/gpu": "670m"}}}
    cluster.kubectl("patch", "queue", "nlp", "--subresource=status", "--type=merge", "-p",
                    json.dumps(status))
    out = cluster.kubectl("get", "queues").stdout
    assert out.split() [:9] == ["NAME", "PRIORITY", "PARENT", "GPU", "QUOTA", "GPU",
                                "FAIRSHARE", "GPU", "ALLOCATED"]
    nlp = next(line for line in out.splitlines() if line.startswith("nlp"))
    assert nlp.split()[:5] == ["nlp", "ml-org", "0.33", "670m", "330m"]
    short = cluster.kubectl("get", "q", "ml-org", "-o", "name").stdout.strip()
    assert short == "queue.scheduling.run.ai/ml-org"


def test_invalid_queue_is_rejected_naming_the_field(cluster: Cluster) -> None:
    bad = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: broken}
spec:
  parentQueue: no-such-queue
  resources:
    gpu: {quota: 2, limit: 1}
"""
    proc = cluster.kubectl("apply", "-f", "-", stdin=bad, check=False)
    assert proc.returncode != 0
    assert "spec.resources.gpu.quota" in proc.stderr
    assert "spec.parentQueue" in proc.stderr
    assert "broken" not in cluster.kubectl("get", "queues").stdout


def test_bad_lending_limit_is_rejected_naming_the_field(cluster: Cluster) -> None:
    template = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {{name: {name}}}
spec:
  resources:
    gpu: {{quota: 3, limit: -1, lendingLimit: {value}}}
"""
    over = cluster.kubectl("apply", "-f", "-", stdin=template.format(name="lender", value=4),
                           check=False)
    assert over.returncode != 0
    assert "spec.resources.gpu.lendingLimit" in over.stderr and "exceed quota" in over.stderr
    text = cluster.kubectl("apply", "-f", "-", stdin=template.format(name="lender", value='"x"'),
                           check=False)
    assert text.returncode != 0 and "spec.resources.gpu.lendingLimit" in text.stderr
    cluster.kubectl("apply", "-f", "-", stdin=template.format(name="lender", value=1))
    got = cluster.kubectl("get", "queue", "lender", "-o",
                          "jsonpath={.spec.resources.gpu.lendingLimit}").stdout
    assert got == "1"
    assert "lendingLimit" in cluster.kubectl("explain", "queue.spec.resources.gpu").stdout


def test_queue_with_children_cannot_be_deleted(cluster: Cluster) -> None:
    cluster.kubectl("apply", "-f", "-", stdin=QUEUES)
    proc = cluster.kubectl("delete", "queue", "ml-org", check=False)
    assert proc.returncode != 0 and "child queues (nlp)" in proc.stderr


def test_explain_queue_spec(cluster: Cluster) -> None:
    out = cluster.kubectl("explain", "queue.spec").stdout
    assert "KIND:       Queue" in out
    for field in ("parentQueue", "priority", "resources"):
        assert field in out
    assert "quota" in cluster.kubectl("explain", "queue.spec.resources.gpu").stdout


def test_pod_columns_wide_and_strategic_apply(cluster: Cluster) -> None:
    cluster.kubectl("apply", "-f", "-", stdin=POD)
    cluster.kubectl("label", "pod", "web", "extra=kept")
    out = cluster.kubectl("get", "pods", "web").stdout
    assert headers(out) == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert out.splitlines()[1].split()[:4] == ["web", "0/2", "Pending", "0"]
    wide = cluster.kubectl("get", "pods", "web", "-o", "wide").stdout
    assert "NODE" in headers(wide) and "IP" in headers(wide)
    # A pod's spec changes only in what Kubernetes lets change (the images): the patch
    # kubectl computes merges the containers by name.
    modified = POD.replace("image: busybox\n    command", "image: busybox:1.36\n    command")
    assert "configured" in cluster.kubectl("apply", "-f", "-", stdin=modified).stdout
    pod = json.loads(cluster.kubectl("get", "pod", "web", "-o", "json").stdout)
    main = pod["spec"]["containers"][0]
    assert main["image"] == "busybox:1.36"
    assert main["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    assert main["command"] == ["sleep", "100"]
    assert [c["name"] for c in pod["spec"]["containers"]] == ["main", "side"]
    assert pod["spec"]["containers"][1]["image"] == "busybox"
    env_changed = modified.replace('{name: B, value: "2"}', '{name: C, value: "3"}')
    refused = cluster.kubectl("apply", "-f", "-", stdin=env_changed, check=False)
    assert refused.returncode != 0 and "pod updates may not change" in refused.stderr
    assert pod["metadata"]["labels"] == {"app": "web", "extra": "kept"}
    as_yaml = yaml.safe_load(cluster.kubectl("get", "pod", "web", "-o", "yaml").stdout)
    assert as_yaml["spec"]["schedulerName"] == "gpushare"


def test_label_annotate_patch_and_delete(cluster: Cluster) -> None:
    cluster.kubectl("run", "tmp", "--image=busybox", "--", "sleep", "1")
    cluster.kubectl("annotate", "pod", "tmp", "note=hello")
    cluster.kubectl("patch", "pod", "tmp", "-p", '{"metadata":{"labels":{"p":"1"}}}')
    cluster.kubectl("patch", "pod", "tmp", "--type=json", "-p",
                    '[{"op":"add","path":"/metadata/labels/q","value":"2"}]')
    pod = json.loads(cluster.kubectl("get", "pod", "tmp", "-o", "json").stdout)
    assert pod["metadata"]["annotations"]["note"] == "hello"
    assert pod["metadata"]["labels"]["p"] == "1" and pod["metadata"]["labels"]["q"] == "2"
    assert 'pod "tmp" deleted' in cluster.kubectl("delete", "pod", "tmp").stdout
    assert cluster.kubectl("get", "pod", "tmp", check=False).returncode != 0


def test_typed_client_commands_send_protobuf(cluster: Cluster) -> None:
    cluster.kubectl("create", "namespace", "proto")
    cluster.kubectl("-n", "proto", "create", "configmap", "c", "--from-literal=k=v")
    cluster.kubectl("-n", "proto", "create", "secret", "generic", "s", "--from-literal=p=q")
    cluster.kubectl("-n", "proto", "create", "role", "r", "--verb=get", "--resource=pods")
    cluster.kubectl("-n", "proto", "create", "rolebinding", "rb", "--role=r", "--user=u")
    cluster.kubectl("-n", "proto", "create", "job", "j", "--image=busybox", "--", "echo", "hi")
    cm = json.loads(cluster.kubectl("-n", "proto", "get", "cm", "c", "-o", "json").stdout)
    assert cm["data"] == {"k": "v"}
    job = json.loads(cluster.kubectl("-n", "proto", "get", "job", "j", "-o", "json").stdout)
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["echo", "hi"]
    assert cluster.kubectl("auth", "can-i", "delete", "pods").stdout.strip() == "yes"
    denied = cluster.kubectl("auth", "can-i", "delete", "pods", "--as=u", "-n", "proto",
                             check=False)
    assert denied.stdout.strip() == "no"
    allowed = cluster.kubectl("auth", "can-i", "get", "pods", "--as=u", "-n", "proto")
    assert allowed.stdout.strip() == "yes"


def test_describe_shows_events(cluster: Cluster, core: client.CoreV1Api) -> None:
    cluster.kubectl("run", "described", "--image=busybox")
    pod = core.read_namespaced_pod("described", "default")
    core.create_namespaced_event("default", {
        "metadata": {"generateName": "described-"},
        "involvedObject": {"kind": "Pod", "name": "described", "namespace": "default",
                           "uid": pod.metadata.uid, "apiVersion": "v1"},
        "reason": "Scheduled", "message": "assigned to node-1", "type": "Normal",
        "source": {"component": "gpushare"}, "count": 1})
    out = cluster.kubectl("describe", "pod", "described").stdout
    assert "Scheduled" in out and "assigned to node-1" in out
    events = cluster.kubectl("get", "events", "--field-selector",
                             "involvedObject.name=described").stdout
    assert "Scheduled" in events


def test_nodes_columns(cluster: Cluster, core: client.CoreV1Api) -> None:
    core.create_node({"metadata": {"name": "gpu-1", "labels": {
        "node-role.kubernetes.io/worker": ""}}, "status": {
        "conditions": [{"type": "Ready", "status": "True"}],
        "nodeInfo": {"kubeletVersion": "v1.32.0-gpushare", "architecture": "amd64",
                     "bootID": "b", "containerRuntimeVersion": "gpushare://0.1",
                     "kernelVersion": "6", "kubeProxyVersion": "", "machineID": "m",
                     "operatingSystem": "linux", "osImage": "Linux", "systemUUID": "u"},
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]}})
    out = cluster.kubectl("get", "nodes", "-o", "wide").stdout
    assert headers(out)[:6] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP"]
    row = next(line for line in out.splitlines() if line.startswith("gpu-1")).split()
    assert row[1:3] == ["Ready", "worker"] and row[4] == "v1.32.0-gpushare"


def test_podgroup_columns(cluster: Cluster) -> None:
    pg = """
apiVersion: scheduling.run.ai/v2alpha2
kind: PodGroup
metadata: {name: gang}
spec: {minMember: 3, queue: nlp}
"""
    cluster.kubectl("apply", "-f", "-", stdin=pg)
    out = cluster.kubectl("get", "pg").stdout
    assert headers(out)[:4] == ["NAME", "MINMEMBER", "QUEUE", "PHASE"]
    assert out.splitlines()[1].split()[:3] == ["gang", "3", "nlp"]
    bad = pg.replace("minMember: 3", "minMember: -1").replace("gang", "gang2")
    proc = cluster.kubectl("apply", "-f", "-", stdin=bad, check=False)
    assert proc.returncode != 0 and "spec.minMember" in proc.stderr


class _FakeAgentLogs(BaseHTTPRequestHandler):
    """A stand-in for the node agent's log endpoint (no agent runs in these tests), over
    TLS with a serving certificate the cluster CA signed, as the API server requires."""

    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        _FakeAgentLogs.seen.append(self.path)
        if "follow=true" in self.path:
            # Streams: one chunk now, the next a while later, like a running container.
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for line in (b"first\n", b"second\n"):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
                time.sleep(0.5)
            self.wfile.write(b"0\r\n\r\n")
            return
        body = b"line one\nline two\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def fake_agent(cluster: Cluster, tmp_path: Path) -> Iterator[int]:
    tls = node_tls(cluster.server.data_dir / "pki", tmp_path / "fake-agent")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(tls.cert), str(tls.key))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeAgentLogs)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()


def test_logs_are_proxied_to_the_node_agent(cluster: Cluster, core: client.CoreV1Api,
                                            fake_agent: int) -> None:
    core.create_node({"metadata": {"name": "logs-node"}, "status": {
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": fake_agent}}}})
    cluster.kubectl("run", "logged", "--image=busybox")
    core.create_namespaced_pod_binding("logged", "default", {
        "metadata": {"name": "logged"}, "target": {"kind": "Node", "name": "logs-node"}},
        _preload_content=False)
    out = cluster.kubectl("logs", "logged", "--tail=5").stdout
    assert out == "line one\nline two\n"
    assert _FakeAgentLogs.seen[-1] == "/containerLogs/default/logged/logged?tailLines=5"
    with http_client(cluster.server) as http, http.stream(
        "GET", "/api/v1/namespaces/default/pods/logged/log", params={"follow": "true"}
    ) as r:
        chunks = list(r.iter_raw())
    assert b"".join(chunks) == b"first\nsecond\n"
    assert chunks[0] == b"first\n"  # passed on as it came, not after the agent finished
    assert cluster.kubectl("logs", "-f", "logged").stdout == "first\nsecond\n"


def test_edit_server_side_apply_and_dry_run(cluster: Cluster, tmp_path: Path) -> None:
    cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: edited}\ndata: {a: '1'}\n"
    assert "serverside-applied" in cluster.kubectl("apply", "--server-side", "-f", "-",
                                                   stdin=cm).stdout
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=cm.replace("'1'", "'2', b: '3'"))
    got = json.loads(cluster.kubectl("get", "cm", "edited", "-o", "json").stdout)
    assert got["data"] == {"a": "2", "b": "3"}
    editor = tmp_path / "editor.sh"
    editor.write_text("#!/bin/sh\nsed -i 's/a: \"2\"/a: \"edited\"/' \"$1\"\n")
    editor.chmod(0o755)
    out = cluster.kubectl("edit", "cm", "edited", env={"KUBE_EDITOR": str(editor)}).stdout
    assert "configmap/edited edited" in out
    got = json.loads(cluster.kubectl("get", "cm", "edited", "-o", "json").stdout)
    assert got["data"]["a"] == "edited"
    dry = cluster.kubectl("create", "configmap", "dry", "--dry-run=server", "-o", "name").stdout
    assert dry.strip() == "configmap/dry"
    assert cluster.kubectl("get", "cm", "dry", check=False).returncode != 0


def test_get_watch_prints_rows(cluster: Cluster) -> None:
    proc = subprocess.Popen([KUBECTL, "--kubeconfig", str(cluster.kubeconfig), "--cache-dir",
                             str(cluster.cache_dir), "get", "pods", "-w",
                             "--request-timeout=4s", "-l", "watched=yes"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    cluster.kubectl("run", "watched", "--image=busybox", "--labels=watched=yes")
    cluster.kubectl("delete", "pod", "watched")
    out, _err = proc.communicate(timeout=20)
    lines = out.splitlines()
    assert re.split(r"\s{2,}", lines[0].strip()) == ["NAME", "READY", "STATUS", "RESTARTS",
                                                      "AGE"]
    assert sum(1 for line in lines[1:] if line.startswith("watched")) >= 2


def test_unknown_queue_fields_are_named_or_pruned(cluster: Cluster) -> None:
    typo = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: typo}
spec:
  parentqueue: ml-org
  resources:
    gpu: {quota: 1, limt: 2}
"""
    proc = cluster.kubectl("apply", "-f", "-", stdin=typo, check=False)
    assert proc.returncode != 0
    assert 'unknown field "spec.parentqueue"' in proc.stderr
    assert 'unknown field "spec.resources.gpu.limt"' in proc.stderr
    cluster.kubectl("apply", "--validate=false", "-f", "-", stdin=typo)
    spec = json.loads(cluster.kubectl("get", "queue", "typo", "-o", "json").stdout)["spec"]
    assert spec == {"resources": {"gpu": {"quota": 1}}}


def test_scale_and_diff(cluster: Cluster) -> None:
    deployment = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: scaled}
spec:
  replicas: 1
  selector: {matchLabels: {app: scaled}}
  template:
    metadata: {labels: {app: scaled}}
    spec: {containers: [{name: c, image: nginx}]}
"""
    cluster.kubectl("apply", "-f", "-", stdin=deployment)
    assert "scaled" in cluster.kubectl("scale", "deployment", "scaled", "--replicas=3").stdout
    got = json.loads(cluster.kubectl("get", "deploy", "scaled", "-o", "json").stdout)
    assert got["spec"]["replicas"] == 3
    diff = cluster.kubectl("diff", "-f", "-", stdin=deployment.replace("replicas: 1",
                                                                       "replicas: 5"),
                           check=False)
    assert diff.returncode == 1 and "+  replicas: 5" in diff.stdout  # 1: differences found
    got = json.loads(cluster.kubectl("get", "deploy", "scaled", "-o", "json").stdout)
    assert got["spec"]["replicas"] == 3  # diff is a dry run
