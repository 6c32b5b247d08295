"""Attack: a node agent's credentials (`data/agent.kubeconfig`, what a pod escaping to the
node's user would take) used against everything else. A node acts for its own node: not
another Node, not pods bound elsewhere (another tenant's), not Secrets or ServiceAccount
tokens its own pods do not reference."""

from __future__ import annotations

import json

from tenancy_support import Kubectl, Platform

OTHER_NODE = """
apiVersion: v1
kind: Node
metadata: {name: elsewhere, labels: {kubernetes.io/hostname: elsewhere}}
"""
VICTIM = """
apiVersion: v1
kind: Secret
metadata: {name: platform-secret, namespace: default}
stringData: {password: hunter2}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: victim-sa, namespace: default}
---
apiVersion: v1
kind: Pod
metadata: {name: victim, namespace: default}
spec:
  nodeName: elsewhere
  serviceAccountName: victim-sa
  containers: [{name: c, image: none, command: ["sleep", "3600"]}]
---
apiVersion: v1
kind: Secret
metadata: {name: mine, namespace: default}
stringData: {k: v}
---
apiVersion: v1
kind: Pod
metadata: {name: own, namespace: default}
spec:
  nodeName: box
  restartPolicy: Never
  volumes: [{name: s, secret: {secretName: mine}}]
  containers: [{name: c, image: none, command: ["sleep", "3600"]}]
"""


def _denied(agent: Kubectl, *args: str, stdin: str | None = None) -> str:
    done = agent.run(*args, stdin=stdin, check=False)
    assert done.returncode != 0, f"the node identity could: kubectl {' '.join(args)}"
    assert "forbidden" in done.stderr.lower(), done.stderr
    return done.stderr


def test_a_node_identity_reaches_only_its_own_node(platform: Platform) -> None:
    agent = Kubectl(platform.data / "agent.kubeconfig")
    assert "system:node:box" in agent.run("auth", "whoami").stdout
    platform.host.apply(OTHER_NODE)
    platform.host.apply(VICTIM)
    # another Node: no label, no status, no delete
    _denied(agent, "label", "node", "elsewhere", "hijacked=true")
    _denied(agent, "patch", "node", "elsewhere", "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": {"conditions": [{"type": "Ready",
                                                         "status": "False"}]}}))
    _denied(agent, "delete", "node", "elsewhere")
    _denied(agent, "create", "-f", "-", stdin=OTHER_NODE.replace("elsewhere", "forged"))
    agent.run("annotate", "node", "box", "security.test/own=yes")    # its own: fine
    # a pod bound elsewhere (another tenant's host pod): not failed, not deleted, not read
    _denied(agent, "patch", "pod", "victim", "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": {"phase": "Failed"}}))
    _denied(agent, "delete", "pod", "victim", "--wait=false")
    _denied(agent, "get", "pod", "victim")
    assert platform.host.json("get", "pod", "victim")["status"].get("phase") != "Failed"
    # Secrets and tokens: only what its own pods reference
    _denied(agent, "get", "secret", "platform-secret")
    _denied(agent, "get", "secrets")
    _denied(agent, "create", "token", "victim-sa")
    _denied(agent, "create", "token", "default", "-n", "kube-system")
    assert agent.json("get", "secret", "mine")["metadata"]["name"] == "mine"
    assert agent.run("create", "token", "default").stdout.strip()
    # Services and EndpointSlices: read everywhere, as kube-proxy and the cluster DNS do
    # (the pod network routes and names them), never written
    platform.host.run("create", "service", "clusterip", "routed", "--tcp=80:8080")
    names = {s["metadata"]["name"] for s in agent.json("get", "services", "-A")["items"]}
    assert {"kubernetes", "routed"} <= names, names
    slices = agent.json("get", "endpointslices.discovery.k8s.io", "-A")["items"]
    assert any(s["metadata"]["name"].startswith("routed") for s in slices), slices
    _denied(agent, "delete", "service", "routed")
    _denied(agent, "delete", "endpointslices.discovery.k8s.io", "--all")
    for resource in ("services", "endpointslices.discovery.k8s.io"):
        watched = agent.run("get", resource, "-A", "--watch-only", "--request-timeout=2s",
                            check=False)
        assert "forbidden" not in watched.stderr.lower(), watched.stderr
