"""The agent's ClusterRole of `deploy/overlays/cluster-with-agent` is enough for the agent,
and the agent needs no more: a real `gpushare agent` process runs with the token of the
overlay's `gpushare-agent` ServiceAccount (from a TokenRequest, as on a cluster), registers
its node, gets its serving certificate, runs a pod that reads a ConfigMap and its own
ServiceAccount token, serves its logs and an exec through the API server, and finishes it
when it is deleted; the agent's log shows no refusal."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_support import KUBECTL, wait_for

from gpushare.apiserver.http.server import ApiServer
from gpushare.cli.compose import api_server

ROOT = Path(__file__).resolve().parents[2]
RBAC = ROOT / "src" / "gpushare" / "deploy" / "overlays" / "cluster-with-agent" / "agent-rbac.yaml"
NODE = "rbac-node"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

POD = f"""
apiVersion: v1
kind: ConfigMap
metadata: {{name: greeting, namespace: default}}
data: {{text: hello}}
---
apiVersion: v1
kind: Pod
metadata: {{name: reader, namespace: default}}
spec:
  nodeName: {NODE}
  restartPolicy: Never
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: busybox
    env: [{{name: GREETING, valueFrom: {{configMapKeyRef: {{name: greeting, key: text}}}}}}]
    command:
    - sh
    - -c
    - >-
      echo "$GREETING";
      test -s "${{GPUSHARE_SERVICEACCOUNT_DIR:-{SA_DIR}}}/token" && echo token;
      sleep 600
"""


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None, check: bool = True) -> str:
    done = subprocess.run([KUBECTL, "--kubeconfig", str(kubeconfig), *args], input=stdin,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 or not check, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[tuple[ApiServer, Path]]:
    assert Path(KUBECTL).exists(), f"the end-to-end tests drive the cluster with {KUBECTL}"
    server = api_server(tmp_path / "api").start()
    try:
        yield server, tmp_path / "api" / "admin.kubeconfig"
    finally:
        server.stop()


def test_the_overlays_agent_role_runs_a_pod_end_to_end(cluster, tmp_path: Path) -> None:
    server, admin = cluster
    kubectl(admin, "create", "namespace", "gpushare")
    kubectl(admin, "create", "serviceaccount", "gpushare-agent", "-n", "gpushare")
    kubectl(admin, "apply", "-f", str(RBAC))
    token = kubectl(admin, "create", "token", "gpushare-agent", "-n", "gpushare",
                    "--duration", "1h").strip()
    agent_kubeconfig = server.write_kubeconfig(tmp_path / "agent.kubeconfig", token=token,
                                               user="gpushare-agent")
    assert "system:serviceaccount:gpushare:gpushare-agent" in kubectl(
        agent_kubeconfig, "auth", "whoami")
    log = tmp_path / "agent.log"
    agent = subprocess.Popen(
        [sys.executable, "-m", "gpushare.cli.main", "agent", "--kubeconfig",
         str(agent_kubeconfig), "--node-name", NODE, "--gpus", "1xH100", "--data-dir",
         str(tmp_path / "agent"), "--heartbeat", "0.5", "--stop-pods-on-exit"],
        stdout=log.open("ab"), stderr=subprocess.STDOUT)
    try:
        # a ServiceAccount is not a node identity: its own approval signs nothing, an
        # administrator approves its serving certificate (on a real cluster the cluster's
        # kubelet-serving signer and approver do)
        csr = wait_for(lambda: kubectl(admin, "get", "csr", "-o", "name").strip(), 60)
        kubectl(admin, "certificate", "approve", "--force", *csr.split())
        ready = "jsonpath={.status.conditions[?(@.type=='Ready')].status}"
        wait_for(lambda: kubectl(admin, "get", "node", NODE, "-o", ready, check=False)
                 == "True", 60)
        kubectl(admin, "apply", "-f", "-", stdin=POD)
        wait_for(lambda: kubectl(admin, "get", "pod", "reader", "-o",
                                 "jsonpath={.status.phase}") == "Running", 60)
        wait_for(lambda: kubectl(admin, "logs", "reader", check=False) == "hello\ntoken\n", 30)
        assert kubectl(admin, "exec", "reader", "--", "sh", "-c", "echo $GREETING") == "hello\n"
        kubectl(admin, "delete", "pod", "reader", "--wait=false")
        wait_for(lambda: "reader" not in kubectl(admin, "get", "pods", "-o", "name"), 60)
    finally:
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(30)
        except subprocess.TimeoutExpired:
            agent.kill()
    refused = [line for line in log.read_text(errors="replace").splitlines()
               if "forbidden" in line.lower()]  # the API's refusals: "... is forbidden: ..."
    assert not refused, refused
