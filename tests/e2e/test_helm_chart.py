"""The Helm chart (deploy/helm/gpushare) renders with the real helm binary to the same
objects as the kustomize ``cluster`` overlay, and what it renders applies server-side to
the embedded server and gives the controllers' ServiceAccount their permissions."""

from __future__ import annotations

import subprocess

import yaml
from e2e_support import KUBECTL

from gpushare.cli.install import DEPLOY
from gpushare.tools import find_tool

CHART = DEPLOY / "helm" / "gpushare"
AGENT_RBAC = DEPLOY / "overlays" / "cluster-with-agent" / "agent-rbac.yaml"


def _helm() -> str:
    """`make test` puts helm in the environment's bin/ (target `helm`), else PATH."""
    found = find_tool("helm")
    assert found, "helm is not installed: run `make helm` (part of `make test`)"
    return found


def _template(*values: str) -> list[dict]:
    done = subprocess.run([_helm(), "template", "gpushare", str(CHART), "--namespace",
                           "gpushare", "--include-crds", *values],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _kustomize(overlay: str) -> list[dict]:
    done = subprocess.run([KUBECTL, "kustomize", str(DEPLOY / "overlays" / overlay)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _by_name(objects: list[dict]) -> dict[tuple[str, str], dict]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def _subjects(binding: dict) -> list[dict]:
    """A binding's subjects; a namespace means something for ServiceAccounts only
    (kustomize's namespace setting stamps it on User subjects too)."""
    return [{k: v for k, v in s.items() if k != "namespace" or s["kind"] == "ServiceAccount"}
            for s in binding.get("subjects") or []]


def test_chart_renders_what_the_cluster_overlay_renders():
    chart = _by_name(_template())
    overlay = _by_name(_kustomize("cluster"))
    # Helm creates the release namespace itself (--create-namespace).
    assert set(chart) == set(overlay) - {("Namespace", "gpushare")}
    for key in (("Deployment", "gpushare-controllers"), ("ClusterRole", "gpushare-controllers"),
                ("ClusterRoleBinding", "gpushare-controllers"),
                ("CustomResourceDefinition", "queues.scheduling.run.ai"),
                ("ConfigMap", "gpushare-scheduler-config")):
        assert chart[key].get("spec") == overlay[key].get("spec"), key
        assert chart[key].get("rules") == overlay[key].get("rules"), key
        assert _subjects(chart[key]) == _subjects(overlay[key]), key
    assert yaml.safe_load(chart[("ConfigMap", "gpushare-scheduler-config")]["data"][
        "scheduler.yaml"]) == yaml.safe_load(overlay[("ConfigMap", "gpushare-scheduler-config")][
            "data"]["scheduler.yaml"])


def test_chart_values_choose_controllers_namespace_and_the_agent():
    objects = _by_name(_template("--set", "controllers=null", "--set", "agent.enabled=true",
                                 "--set", "replicas=3", "--namespace", "gpu-system"))
    deployment = objects[("Deployment", "gpushare-controllers")]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not [a for a in args if a.startswith("--only=")]  # every controller
    assert "--leader-elect-resource-namespace=gpu-system" in args
    assert deployment["spec"]["replicas"] == 3
    assert ("DaemonSet", "gpushare-agent") in objects
    binding = objects[("ClusterRoleBinding", "gpushare-controllers")]
    assert {"kind": "ServiceAccount", "name": "gpushare-controllers",
            "namespace": "gpu-system"} in binding["subjects"]
    # the agent's role: the overlay's, its ServiceAccount in the release's namespace
    overlay = _by_name(list(yaml.safe_load_all(AGENT_RBAC.read_text())))
    assert objects[("ClusterRole", "gpushare-agent")]["rules"] == overlay[
        ("ClusterRole", "gpushare-agent")]["rules"]
    assert {"kind": "ServiceAccount", "name": "gpushare-agent", "namespace": "gpu-system"} in \
        objects[("ClusterRoleBinding", "gpushare-agent")]["subjects"]
    assert ("ClusterRole", "gpushare-agent") not in _by_name(_template())


def test_chart_output_applies_server_side(server, kubectl):
    done = subprocess.run([_helm(), "template", "gpushare", str(CHART), "--namespace",
                           "gpushare", "--include-crds"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    kubectl.run("create", "namespace", "gpushare")
    kubectl.run("apply", "--server-side", "-f", "-", stdin=done.stdout)
    assert kubectl.json("get", "deployment", "-n", "gpushare",
                        "gpushare-controllers")["spec"]["replicas"] == 2
    kubectl.run("get", "crd", "queues.scheduling.run.ai", "podgroups.scheduling.run.ai")
    kubectl.run("auth", "can-i", "create", "pods/binding",
                "--as=system:serviceaccount:gpushare:gpushare-controllers")


def test_chart_with_gpu_sharing_renders_what_its_overlay_renders():
    chart = _by_name(_template("--set", "gpuSharing.enabled=true"))
    overlay = _by_name(_kustomize("cluster-with-gpu-sharing"))
    assert set(chart) == set(overlay) - {("Namespace", "gpushare")}
    for key in (("Deployment", "gpushare-controllers"), ("Deployment", "gpushare-webhook"),
                ("Service", "gpushare-webhook"), ("DaemonSet", "gpushare-node-daemon"),
                ("ClusterRole", "gpushare-webhook"), ("ClusterRole", "gpushare-node-daemon"),
                ("ClusterRoleBinding", "gpushare-node-daemon"),
                ("MutatingWebhookConfiguration", "gpushare-gpu-fractions")):
        assert chart[key].get("spec") == overlay[key].get("spec"), key
        assert chart[key].get("rules") == overlay[key].get("rules"), key
        assert chart[key].get("webhooks") == overlay[key].get("webhooks"), key
        assert _subjects(chart[key]) == _subjects(overlay[key]), key
    args = chart[("Deployment", "gpushare-controllers")]["spec"]["template"]["spec"][
        "containers"][0]["args"]
    assert "--gpu-share-configmaps" in args
    daemon = chart[("DaemonSet", "gpushare-node-daemon")]["spec"]["template"]["spec"]
    assert daemon["hostPID"] and "hostNetwork" not in daemon
    assert not daemon["containers"][0]["securityContext"].get("privileged")
    # without the option, none of it
    plain = _by_name(_template())
    assert ("MutatingWebhookConfiguration", "gpushare-gpu-fractions") not in plain
    assert "--gpu-share-configmaps" not in plain[("Deployment", "gpushare-controllers")][
        "spec"]["template"]["spec"]["containers"][0]["args"]
