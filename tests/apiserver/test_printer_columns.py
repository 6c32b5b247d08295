"""`kubectl get` shows the columns kube-apiserver's printers give these kinds."""

from __future__ import annotations

import re

import pytest
from apiserver_harness import Cluster, http_client

OBJECTS = """
apiVersion: batch/v1
kind: CronJob
metadata: {name: tick}
spec:
  schedule: "*/5 * * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers: [{name: c, image: busybox}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web}
spec:
  replicas: 2
  serviceName: web
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: c, image: nginx}]}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      nodeSelector: {pool: gpu}
      containers: [{name: c, image: busybox}]
---
apiVersion: v1
kind: ResourceQuota
metadata: {name: q}
spec:
  hard: {pods: "10", requests.cpu: "2", limits.memory: 4Gi}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: budget}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: web}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: ing}
spec:
  ingressClassName: nginx
  tls: [{hosts: [a.example.com]}]
  rules:
  - host: a.example.com
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
  - host: b.example.com
---
apiVersion: v1
kind: Endpoints
metadata: {name: ep}
subsets:
- addresses: [{ip: 10.0.0.1}, {ip: 10.0.0.2}]
  ports: [{port: 80}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: eps}
addressType: IPv4
ports: [{port: 80}, {port: 443}]
endpoints:
- addresses: [10.0.0.1]
- addresses: [10.0.0.2]
"""


def split(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


@pytest.fixture(scope="module", autouse=True)
def objects(cluster: Cluster) -> None:
    cluster.kubectl("apply", "-f", "-", stdin=OBJECTS)
    with http_client(cluster.server) as http:
        r = http.patch("/apis/apps/v1/namespaces/default/daemonsets/agent/status",
                       json={"status": {"desiredNumberScheduled": 2,
                                        "currentNumberScheduled": 2, "numberReady": 1,
                                        "updatedNumberScheduled": 2, "numberAvailable": 1,
                                        "numberMisscheduled": 0}},
                       headers={"Content-Type": "application/merge-patch+json"})
        assert r.status_code == 200, r.text


@pytest.mark.parametrize(("resource", "header", "row"), [
    ("cronjobs", ["NAME", "SCHEDULE", "TIMEZONE", "SUSPEND", "ACTIVE", "LAST SCHEDULE", "AGE"],
     ["tick", "*/5 * * * *", "<none>", "False", "0", "<none>"]),
    ("statefulsets", ["NAME", "READY", "AGE"], ["web", "0/2"]),
    ("daemonsets", ["NAME", "DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE",
                    "NODE SELECTOR", "AGE"], ["agent", "2", "2", "1", "2", "1", "pool=gpu"]),
    ("resourcequotas", ["NAME", "AGE", "REQUEST", "LIMIT"], None),
    ("poddisruptionbudgets", ["NAME", "MIN AVAILABLE", "MAX UNAVAILABLE",
                              "ALLOWED DISRUPTIONS", "AGE"], ["budget", "1", "N/A", "0"]),
    ("ingresses", ["NAME", "CLASS", "HOSTS", "ADDRESS", "PORTS", "AGE"], None),
    ("endpoints", ["NAME", "ENDPOINTS", "AGE"], ["ep", "10.0.0.1:80,10.0.0.2:80"]),
    ("endpointslices", ["NAME", "ADDRESSTYPE", "PORTS", "ENDPOINTS", "AGE"],
     ["eps", "IPv4", "80,443", "10.0.0.1,10.0.0.2"]),
])
def test_columns_as_kubernetes(cluster: Cluster, resource: str, header: list[str],
                               row: list[str] | None) -> None:
    lines = cluster.kubectl("get", resource).stdout.splitlines()
    assert split(lines[0]) == header
    mine = [split(line) for line in lines[1:]
            if split(line)[0] in {"tick", "web", "agent", "q", "budget", "ing", "ep", "eps"}]
    assert mine, lines
    if row is not None:
        assert mine[0][:len(row)] == row


def test_quota_and_ingress_cells(cluster: Cluster) -> None:
    quota = split(cluster.kubectl("get", "quota", "q").stdout.splitlines()[1])
    assert quota[0] == "q"
    assert quota[2:] == ["pods: 0/10, requests.cpu: 0/2", "limits.memory: 0/4Gi"]
    ing = split(cluster.kubectl("get", "ingress", "ing").stdout.splitlines()[1])
    assert ing[:3] == ["ing", "nginx", "a.example.com,b.example.com"]
    assert ing[3] == "80, 443"


def test_wide_columns(cluster: Cluster) -> None:
    out = cluster.kubectl("get", "cronjob", "tick", "-o", "wide").stdout.splitlines()
    assert split(out[0])[-3:] == ["CONTAINERS", "IMAGES", "SELECTOR"]
    assert split(out[1])[-3:] == ["c", "busybox", "<none>"]
    ds = cluster.kubectl("get", "ds", "agent", "-o", "wide").stdout.splitlines()
    assert split(ds[1])[-3:] == ["c", "busybox", "app=agent"]
